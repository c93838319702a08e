-- A worker reports a result. Ignored (returns 0) unless the job is IN_PROGRESS on this
-- worker: a late result after cancel, timeout or a requeue must not overwrite anything.
-- Returns {queued at, started at} (ms) when recorded, for the delay and execution metrics.
-- Arguments: store/args_jobs.py Finish (`fields`: field/value pairs to write).
redis.call('SREM', P .. 'wx:' .. worker, id)  -- a stopped job's handler has returned
-- One read for this script and finalize's: FINALIZE_READS, then what only this one needs.
local wanted = {unpack(FINALIZE_READS)}
local n = #wanted
for i, f in ipairs({F_WORKER, F_SYNC, F_QUEUED, F_API_KEY}) do wanted[n + i] = f end
local read = redis.call('HMGET', jkey(id), unpack(wanted))
local st, started = read[1], read[6]
local wk, sy, queued, key = read[n + 1], read[n + 2], read[n + 3], read[n + 4]
if st ~= 'IN_PROGRESS' or wk ~= worker then return 0 end
finalize(ep, id, status, now, worker, sy, ret_run, ret_sync, {unpack(ARGV, fields_from)}, read)
-- Its execution time is its API key's usage (`uk:<chunk>`, store/keys.py) in the hour it
-- ended: ms, and GPU-ms or vCPU-ms at the endpoint's rate.
local ran = now - (tonumber(started) or now)
if ran > 0 then
  local t = math.floor(now / 1000)
  local hour, chunk = t - t % 3600, t - t % USAGE_CHUNK_S
  local use, field = P .. 'uk:' .. chunk, hour .. ':' .. (key or '-') .. ':'
  local first = redis.call('HINCRBY', use, field .. 'x', ran) == ran
  if gpus > 0 then redis.call('HINCRBY', use, field .. 'g:' .. gpu_type, ran * gpus) end
  if vcpus > 0 then redis.call('HINCRBY', use, field .. 'c', ran * vcpus) end
  -- The key's life is set with each field's first count (every count's time is positive).
  if first then redis.call('EXPIREAT', use, chunk + USAGE_CHUNK_S + USAGE_KEEP_S) end
end
return {tonumber(queued) or now, tonumber(started) or now}
