-- POST …/batch/{id}/requests: more requests (pairs from `requests_from`) for a DRAFT.
-- Arguments: store/args_batches.py AddRequests.
-- Returns {'ok', <new total>}, {'gone', ''}, {'state', <status>}, or a limit as batch_create.
local rec = bkey(batch, BP_RECORD)
local st, total, bytes, seq = unpack(redis.call('HMGET', rec, B_STATUS, B_TOTAL, B_BYTES, B_SEQ))
if not st then return {'gone', ''} end
if st ~= BS_DRAFT then return {'state', st} end
local n = (#ARGV - requests_from + 1) / 2
total = tonumber(total)
if total + n > most_requests then return {'requests', tostring(most_requests)} end
bytes = tonumber(bytes)
for i = requests_from + 1, #ARGV, 2 do bytes = bytes + #ARGV[i] end
if bytes > most_bytes then return {'bytes', tostring(most_bytes)} end
seq = tonumber(seq)
for i = requests_from, #ARGV, 2 do
  seq = seq + 1
  redis.call('ZADD', bkey(batch, BP_IDS), seq, ARGV[i])
  redis.call('HSET', bkey(batch, BP_INPUTS), ARGV[i], ARGV[i + 1])
end
redis.call('HSET', rec, B_SEQ, seq, B_TOTAL, total + n, B_BYTES, bytes)
return {'ok', tostring(total + n)}
