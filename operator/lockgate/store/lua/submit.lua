-- Accept a job: record it and queue it. Arguments: store/args_jobs.py Submit (quotas 0:
-- none; `idem` '' for none). Returns {id, status} of the job: this one, or the one first
-- submitted with the same idempotency key while it lives (then nothing is queued); or
-- -1 (the endpoint's queued-jobs quota is full) or -2 (its queued-bytes quota is full).
-- Waiting job-takes are woken only when the queues were empty (the event names the job):
-- while jobs wait, each taker that leaves some behind wakes the next waiter of its replica
-- (see gateway/notify.py).
local ik = P .. 'ik:' .. idem
if idem ~= '' then
  local first = redis.call('GET', ik)
  if first then
    local st, created, lived = unpack(redis.call('HMGET', jkey(first), F_STATUS, F_CREATED,
      F_TTL))
    if st and tonumber(created) + tonumber(lived) > now then return {first, st} end
  end
end
local jk = jkey(id)
-- A record with this id exists only when this very submission was re-sent (ids are fresh
-- UUIDs) by a retry after a dropped reply: its state is given.
local st = redis.call('HGET', jk, F_STATUS)
if st then return {id, st} end
local queued = redis.call('ZCARD', P .. 'q') + redis.call('ZCARD', P .. 'ql')
-- The byte count restarts from 0 whenever the queues are empty: no drift outlives that.
local queued_bytes = queued > 0 and math.max(0, tonumber(redis.call('GET', P .. 'qb')) or 0) or 0
if max_jobs > 0 and queued >= max_jobs then return -1 end
if max_bytes > 0 and queued_bytes + size > max_bytes then return -2 end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HSET', jk, F_STATUS, 'IN_QUEUE', F_CREATED, now, F_QUEUED, now, F_SEQ, seq, F_TTL, ttl,
  unpack(ARGV, fields_from))
expire_at(id, now + ttl)
redis.call('ZADD', P .. 'ix:IN_QUEUE', now * ORDER_SLOTS + seq % ORDER_SLOTS, id)
if idem ~= '' then redis.call('SET', ik, id, 'PX', ttl) end
redis.call('SET', P .. 'qb', queued_bytes + size)
redis.call('ZADD', P .. (low == '1' and 'ql' or 'q'), seq, id)
if queued == 0 then redis.call('PUBLISH', EVENTS, 'q:' .. ep .. ':' .. id) end
return {id, 'IN_QUEUE'}
