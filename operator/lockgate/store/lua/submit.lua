-- Accept a job: record it and queue it. ARGV: ep, id, now, ttl, low, idempotency key digest
-- ('' for none), field/value pairs... Returns {id, status} of the job: this one, or the one
-- first submitted with the same idempotency key while it lives (then nothing is queued).
-- Waiting job-takes are woken only when the queues were empty: while jobs wait, each
-- taker that leaves some behind wakes the next waiter of its replica (see gateway/notify.py).
local ep, id, now, ttl, low = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local idem = ARGV[6]
local ik = P .. 'ik:' .. idem
if idem ~= '' then
  local first = redis.call('GET', ik)
  if first then
    local f = redis.call('HMGET', jkey(first), 'st', 'cr', 'tl')
    if f[1] and tonumber(f[2]) + tonumber(f[3]) > now then return {first, f[1]} end
  end
end
local jk = jkey(id)
local st = redis.call('HGET', jk, 'st')
if st then return {id, st} end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HSET', jk, 'st', 'IN_QUEUE', 'cr', now, 'qd', now, 'sq', seq, 'tl', ttl,
  unpack(ARGV, 7))
expire_at(id, now + ttl)
if idem ~= '' then redis.call('SET', ik, id, 'PX', ttl) end
local idle = redis.call('ZCARD', P .. 'q') + redis.call('ZCARD', P .. 'ql') == 0
redis.call('ZADD', P .. (low == '1' and 'ql' or 'q'), seq, id)
if idle then redis.call('PUBLISH', EVENTS, 'q:' .. ep) end
return {id, 'IN_QUEUE'}
