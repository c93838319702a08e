-- The runner queued these requests (`ids_from` on) as jobs of the batch pool: each still
-- waiting moves from the inputs to the open set.
-- Arguments: store/args_batches.py MarkQueued.
-- Returns the ids that were no longer waiting (the batch was cancelled meanwhile).
local gone = {}
for i = ids_from, #ARGV do
  if redis.call('HDEL', bkey(batch, BP_INPUTS), ARGV[i]) == 1 then
    redis.call('SADD', bkey(batch, BP_OPEN), ARGV[i])
  else
    table.insert(gone, ARGV[i])
  end
end
return gone
