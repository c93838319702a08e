-- The runner saw these requests end ((id, 1|0 completed, result JSON) triples from
-- `ended_from`): each still open gets its result and is counted, once; and the number in
-- progress it saw.
-- Arguments: store/args_batches.py RecordResults.
-- Returns {total, completed, failed, still open}.
local rec, open = bkey(batch, BP_RECORD), bkey(batch, BP_OPEN)
for i = ended_from, #ARGV, 3 do
  if redis.call('SREM', open, ARGV[i]) == 1 then
    redis.call('HSET', bkey(batch, BP_RESULTS), ARGV[i], ARGV[i + 2])
    redis.call('HINCRBY', rec, ARGV[i + 1] == '1' and B_COMPLETED or B_FAILED, 1)
  end
end
redis.call('HSET', rec, B_IN_PROGRESS, in_progress)
local total, completed, failed = unpack(redis.call('HMGET', rec, B_TOTAL, B_COMPLETED, B_FAILED))
return {tonumber(total), tonumber(completed), tonumber(failed), redis.call('SCARD', open)}
