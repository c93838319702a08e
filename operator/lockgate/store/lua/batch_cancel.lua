-- POST …/batch/{id}/cancel: its requests not yet queued end with the result `cancelled`
-- (counted failed); a DRAFT is then CANCELLED at once, a running batch marked cancelling
-- (the runner cancels its queued requests; the running ones finish).
-- Arguments: store/args_batches.py CancelBatch.
-- Returns {'draft', ''}, {'cancelling', ''}, {'gone', ''} or {'state', <status>} (done).
local rec = bkey(batch, BP_RECORD)
local st, done = unpack(redis.call('HMGET', rec, B_STATUS, B_DONE))
if not st then return {'gone', ''} end
local draft = st == BS_DRAFT
if not draft and (st ~= BS_FINALIZED or done) then return {'state', st} end
redis.call('HSET', rec, B_CANCELLING, 1)
local inputs = bkey(batch, BP_INPUTS)
local left = redis.call('HKEYS', inputs)
for _, id in ipairs(left) do
  redis.call('HSET', bkey(batch, BP_RESULTS), id, cancelled)
end
if #left > 0 then
  redis.call('DEL', inputs)
  redis.call('HINCRBY', rec, B_FAILED, #left)
end
if draft then
  redis.call('HSET', rec, B_STATUS, BS_CANCELLED)
  return {'draft', ''}
end
return {'cancelling', ''}
