-- POST …/batch: a new DRAFT batch with its first requests (pairs from `requests_from`).
-- Arguments: store/args_batches.py CreateBatch.
-- Returns {'ok', ''}, or {'active'|'requests'|'bytes', <the limit>} past a limit.
local active = P .. BATCH_KEY .. BATCH_ACTIVE
if redis.call('SCARD', active) >= most_active then return {'active', tostring(most_active)} end
local n = (#ARGV - requests_from + 1) / 2
if n > most_requests then return {'requests', tostring(most_requests)} end
local bytes = 0
for i = requests_from + 1, #ARGV, 2 do bytes = bytes + #ARGV[i] end
if bytes > most_bytes then return {'bytes', tostring(most_bytes)} end
local rec = bkey(batch, BP_RECORD)
redis.call('ZADD', P .. BATCH_KEY, now, batch)
redis.call('SADD', active, batch)
redis.call('HSET', rec, B_STATUS, BS_DRAFT, B_CREATED, now, B_TOTAL, n, B_COMPLETED, 0,
  B_FAILED, 0, B_IN_PROGRESS, 0, B_BYTES, bytes, B_NAME, '', B_SEQ, n)
if webhook ~= '' then redis.call('HSET', rec, B_WEBHOOK, webhook) end
local seq = 0
for i = requests_from, #ARGV, 2 do
  seq = seq + 1
  redis.call('ZADD', bkey(batch, BP_IDS), seq, ARGV[i])
  redis.call('HSET', bkey(batch, BP_INPUTS), ARGV[i], ARGV[i + 1])
end
return {'ok', ''}
