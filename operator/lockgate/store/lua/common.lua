-- Shared by every script (prepended at load time). KEYS[1] is the endpoint's key prefix
-- `lg:{ep}:`; per-job and per-worker keys are derived from it (see store/keys.py).
local P = KEYS[1]
local EVENTS = 'lg:events'

local function jkey(id) return P .. 'j:' .. id end

-- Move a job into a final state: release its worker slot, count it, shorten its life to
-- the retention (never beyond its ttl), and wake /runsync waiters.
-- rec = {status, worker, sync} as read by the caller.
local function finalize(ep, id, status, now, worker, sync, ret_run, ret_sync, extra)
  local jk = jkey(id)
  redis.call('HSET', jk, 'st', status, 'fi', now, unpack(extra))
  redis.call('ZREM', P .. 'run', id)
  if worker then redis.call('SREM', P .. 'wj:' .. worker, id) end
  if status == 'COMPLETED' then
    redis.call('HINCRBY', P .. 'stats', 'completed', 1)
  elseif status == 'FAILED' or status == 'TIMED_OUT' then
    redis.call('HINCRBY', P .. 'stats', 'failed', 1)
  end
  local keep = tonumber(sync == '1' and ret_sync or ret_run)
  local left = redis.call('PTTL', jk)
  if left > 0 and left < keep then keep = left end
  redis.call('PEXPIRE', jk, keep)
  redis.call('PEXPIRE', P .. 's:' .. id, keep)
  if sync == '1' then redis.call('PUBLISH', EVENTS, 'd:' .. ep .. ':' .. id) end
end

-- Ask a worker to stop a job it holds, and wake its job-stop long-poll.
local function signal_stop(ep, worker, id)
  local sk = P .. 'stop:' .. worker
  redis.call('RPUSH', sk, id)
  redis.call('PEXPIRE', sk, 3600000)
  redis.call('PUBLISH', EVENTS, 's:' .. ep .. ':' .. worker)
end
