-- Accept a job: record it and queue it. ARGV: ep, id, now, ttl, low, field/value pairs...
-- Waiting job-takes are woken only when the queues were empty: while jobs wait, each
-- taker that leaves some behind wakes the next waiter of its replica (see gateway/notify.py).
local ep, id, now, ttl, low = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local jk = jkey(id)
if redis.call('EXISTS', jk) == 1 then return 0 end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HSET', jk, 'st', 'IN_QUEUE', 'cr', now, 'qd', now, 'sq', seq, 'tl', ttl,
  unpack(ARGV, 6))
expire_at(id, now + ttl)
local idle = redis.call('ZCARD', P .. 'q') + redis.call('ZCARD', P .. 'ql') == 0
redis.call('ZADD', P .. (low == '1' and 'ql' or 'q'), seq, id)
if idle then redis.call('PUBLISH', EVENTS, 'q:' .. ep) end
return 1
