-- DELETE …/batch/{id}/requests/{request}: remove one request of a DRAFT.
-- Arguments: store/args_batches.py DeleteRequest.
-- Returns {'ok', ''}, {'gone', ''}, {'state', <status>} or {'missing', ''}.
local rec = bkey(batch, BP_RECORD)
local st = redis.call('HGET', rec, B_STATUS)
if not st then return {'gone', ''} end
if st ~= BS_DRAFT then return {'state', st} end
if redis.call('ZREM', bkey(batch, BP_IDS), request) == 0 then return {'missing', ''} end
local raw = redis.call('HGET', bkey(batch, BP_INPUTS), request) or ''
redis.call('HDEL', bkey(batch, BP_INPUTS), request)
redis.call('HINCRBY', rec, B_TOTAL, -1)
redis.call('HINCRBY', rec, B_BYTES, -#raw)
return {'ok', ''}
