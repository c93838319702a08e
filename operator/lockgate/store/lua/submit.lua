-- Accept a job: record it and queue it. ARGV: ep, id, now, ttl, low, max queued jobs,
-- max queued bytes (0: no quota), input bytes, idempotency key digest ('' for none),
-- field/value pairs... Returns {id, status} of the job: this one, or the one first
-- submitted with the same idempotency key while it lives (then nothing is queued); or
-- -1 (the endpoint's queued-jobs quota is full) or -2 (its queued-bytes quota is full).
-- Waiting job-takes are woken only when the queues were empty (the event names the job):
-- while jobs wait, each taker that leaves some behind wakes the next waiter of its replica
-- (see gateway/notify.py).
local ep, id, now, ttl, low = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local max_jobs, max_bytes, size = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local idem = ARGV[9]
local ik = P .. 'ik:' .. idem
if idem ~= '' then
  local first = redis.call('GET', ik)
  if first then
    local f = redis.call('HMGET', jkey(first), 'st', 'cr', 'tl')
    if f[1] and tonumber(f[2]) + tonumber(f[3]) > now then return {first, f[1]} end
  end
end
local jk = jkey(id)
-- A record with this id exists only when this very submission was re-sent (ids are fresh
-- UUIDs) by a retry after a dropped reply: its state is given.
local st = redis.call('HGET', jk, 'st')
if st then return {id, st} end
local queued = redis.call('ZCARD', P .. 'q') + redis.call('ZCARD', P .. 'ql')
-- The byte count restarts from 0 whenever the queues are empty: no drift outlives that.
local queued_bytes = queued > 0 and math.max(0, tonumber(redis.call('GET', P .. 'qb')) or 0) or 0
if max_jobs > 0 and queued >= max_jobs then return -1 end
if max_bytes > 0 and queued_bytes + size > max_bytes then return -2 end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HSET', jk, 'st', 'IN_QUEUE', 'cr', now, 'qd', now, 'sq', seq, 'tl', ttl,
  unpack(ARGV, 10))
expire_at(id, now + ttl)
redis.call('ZADD', P .. 'ix:IN_QUEUE', now * ORDER_SLOTS + seq % ORDER_SLOTS, id)
if idem ~= '' then redis.call('SET', ik, id, 'PX', ttl) end
redis.call('SET', P .. 'qb', queued_bytes + size)
redis.call('ZADD', P .. (low == '1' and 'ql' or 'q'), seq, id)
if queued == 0 then redis.call('PUBLISH', EVENTS, 'q:' .. ep .. ':' .. id) end
return {id, 'IN_QUEUE'}
