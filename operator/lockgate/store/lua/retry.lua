-- /retry: FAILED or TIMED_OUT -> IN_QUEUE with the same id and input; output removed.
-- ARGV: ep, id, now. Returns false for an unknown job, {1, 'IN_QUEUE'} or {0, state}.
local ep, id, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'lp', 'cr', 'tl')
if not f[1] then return false end
if f[1] ~= 'FAILED' and f[1] ~= 'TIMED_OUT' then return {0, f[1]} end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HDEL', jk, 'out', 'err', 'sa', 'fi', 'wk', 'at', 'sb')
reindex(id, f[1], 'IN_QUEUE')
redis.call('HSET', jk, 'st', 'IN_QUEUE', 'qd', now, 'sq', seq)
expire_at(id, tonumber(f[3]) + tonumber(f[4]))
redis.call('DEL', P .. 's:' .. id)
redis.call('ZADD', P .. (f[2] == '1' and 'ql' or 'q'), seq, id)
count_queued(id, 1)
redis.call('HINCRBY', P .. 'stats', 'retried', 1)
redis.call('PUBLISH', EVENTS, 'q:' .. ep)
return {1, 'IN_QUEUE'}
