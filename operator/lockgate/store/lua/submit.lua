-- Accept a job: record it and queue it. ARGV: ep, id, now, ttl, low, max queued jobs,
-- max queued bytes (0: no quota), input bytes, field/value pairs...
-- Returns 1 (queued), 0 (the record exists: this very submission, re-sent), -1 (the
-- endpoint's queued-jobs quota is full) or -2 (its queued-bytes quota is full).
-- Waiting job-takes are woken only when the queues were empty: while jobs wait, each
-- taker that leaves some behind wakes the next waiter of its replica (see gateway/notify.py).
local ep, id, now, ttl, low = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local max_jobs, max_bytes, size = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local jk = jkey(id)
if redis.call('EXISTS', jk) == 1 then return 0 end
local queued = redis.call('ZCARD', P .. 'q') + redis.call('ZCARD', P .. 'ql')
-- The byte count restarts from 0 whenever the queues are empty: no drift outlives that.
local queued_bytes = queued > 0 and math.max(0, tonumber(redis.call('GET', P .. 'qb')) or 0) or 0
if max_jobs > 0 and queued >= max_jobs then return -1 end
if max_bytes > 0 and queued_bytes + size > max_bytes then return -2 end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HSET', jk, 'st', 'IN_QUEUE', 'cr', now, 'qd', now, 'sq', seq, 'tl', ttl,
  unpack(ARGV, 9))
expire_at(id, now + ttl)
redis.call('SET', P .. 'qb', queued_bytes + size)
redis.call('ZADD', P .. (low == '1' and 'ql' or 'q'), seq, id)
if queued == 0 then redis.call('PUBLISH', EVENTS, 'q:' .. ep) end
return 1
