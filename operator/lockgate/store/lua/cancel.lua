-- /cancel: IN_QUEUE or IN_PROGRESS -> CANCELLED; a running job's worker gets a stop signal.
-- ARGV: ep, id, now, retention run, retention sync.
-- Returns false for an unknown job, {1, 'CANCELLED'}, or {0, <ineligible state>}.
local ep, id, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local f = redis.call('HMGET', jkey(id), 'st', 'wk', 'sy')
if not f[1] then return false end
if f[1] == 'IN_QUEUE' then
  redis.call('ZREM', P .. 'q', id)
  redis.call('ZREM', P .. 'ql', id)
  count_queued(id, -1)
elseif f[1] == 'IN_PROGRESS' then
  -- A removal first: a full Redis (noeviction) refuses a script's growing writes only
  -- until it made its first write, so a cancel still goes through to drain a full store.
  redis.call('ZREM', P .. 'run', id)
  signal_stop(ep, f[2], id)
else
  return {0, f[1]}
end
finalize(ep, id, 'CANCELLED', now, f[2], f[3], ARGV[4], ARGV[5], {})
return {1, 'CANCELLED'}
