-- When workers started (the operator from their pods' creation, dev mode from spawning
-- their processes), for their cold-start time: from the start to the worker's first call
-- (common.lua `beat`). Arguments: store/args_workers.py WorkerStarted (`starts`: worker,
-- start (ms) pairs). A worker whose first
-- call came first (in `wfc`) is counted now; one not yet heard from has its start kept
-- (in `wst`) until its first call or its release; one already heard from without a first
-- call kept (an operator restart seeing its pods again) is left alone, unless it is still
-- warming up (its first call is the end of its warm-up, warmup_done.lua).
-- Returns how many were counted.
local counted = 0
local starts, firsts = P .. 'wst', P .. 'wfc'
for i = starts_from, #ARGV, 2 do
  local worker, start = ARGV[i], tonumber(ARGV[i + 1])
  local first = redis.call('HGET', firsts, worker)
  if first then
    redis.call('HDEL', firsts, worker)
    count_interval(now, 'b' .. delay_bucket(tonumber(first) - start))
    counted = counted + 1
  elseif not redis.call('ZSCORE', P .. 'w', worker) or redis.call('HEXISTS', P .. 'wu', worker) == 1 then
    redis.call('HSET', starts, worker, start)
    redis.call('PEXPIRE', starts, COLD_START_KEEP)
  end
end
return counted
