-- /retry: FAILED or TIMED_OUT -> IN_QUEUE with the same id and input; output removed.
-- Arguments: store/args_jobs.py Retry. Returns false for an unknown job, {1, 'IN_QUEUE'}
-- or {0, state}.
local jk = jkey(id)
local st, low, created, ttl = unpack(redis.call('HMGET', jk, F_STATUS, F_LOW_PRIORITY,
  F_CREATED, F_TTL))
if not st then return false end
if st ~= 'FAILED' and st ~= 'TIMED_OUT' then return {0, st} end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HDEL', jk, F_OUTPUT, F_ERROR, F_STARTED, F_FINISHED, F_WORKER, F_ATTEMPTS, F_STREAM_BYTES)
reindex(id, st, 'IN_QUEUE')
redis.call('HSET', jk, F_STATUS, 'IN_QUEUE', F_QUEUED, now, F_SEQ, seq)
expire_at(id, tonumber(created) + tonumber(ttl))
redis.call('DEL', P .. 's:' .. id)
redis.call('ZADD', P .. (low == '1' and 'ql' or 'q'), seq, id)
count_queued(id, 1)
redis.call('HINCRBY', P .. 'stats', 'retried', 1)
redis.call('PUBLISH', EVENTS, 'q:' .. ep)
return {1, 'IN_QUEUE'}
