-- Shared by every script (prepended at load time). KEYS[1] is the endpoint's key prefix
-- `lg:{ep}:`; per-job and per-worker keys are derived from it (see store/keys.py).
local P = KEYS[1]
local EVENTS = 'lg:events'
-- A running job's record outlives its ttl by this much (ms), so the sweeper can still
-- find its worker to stop it; readers treat the job as gone from the ttl on.
local RUNNING_GRACE = 60000
-- No record lives longer than this after its submission (ms): the longest ttl
-- (models/jobs.py MAX_DURATION_MS, 7 days; retention never outlasts the ttl) plus the grace.
local INDEX_MAX_AGE = 604800000 + RUNNING_GRACE
-- A job a worker was told to stop stays in `wx:<worker>` (the worker counts as busy: a sync
-- handler cannot be interrupted) until its ping no longer lists it; dies this long (ms)
-- after the last ping that did.
local STOPPED_RUNNING_MS = 60000

local function jkey(id) return P .. 'j:' .. id end

-- The listing index of GET /requests (list_jobs.lua): one zset per state, `ix:<state>`,
-- holding each job under its current state with a fixed score, its place in time:
-- createdAt (ms) * ORDER_SLOTS + submission sequence mod ORDER_SLOTS (unique per job
-- unless ORDER_SLOTS jobs are submitted within one ms; store/keys.py has the same number).
local ORDER_SLOTS = 1024
local STATES = {'IN_QUEUE', 'IN_PROGRESS', 'COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'}

-- Move a job's index entry from its old state's zset to its new one's (same score).
local function reindex(id, from, to)
  if not from or from == to then return end
  local score = redis.call('ZSCORE', P .. 'ix:' .. from, id)
  if score then
    redis.call('ZREM', P .. 'ix:' .. from, id)
    redis.call('ZADD', P .. 'ix:' .. to, score, id)
  end
end

-- Drop a job from the listing index (its record is gone; its state may be unknown).
local function unindex(id)
  for _, s in ipairs(STATES) do redis.call('ZREM', P .. 'ix:' .. s, id) end
end

-- Bytes of input queued on the endpoint, for its queued-bytes quota (see submit.lua):
-- counted as jobs enter (sign 1) and leave (sign -1) the queues. `size`: the job's input
-- bytes when the caller has read them already.
local function count_queued(id, sign, size)
  redis.call('INCRBY', P .. 'qb', sign * (size or redis.call('HSTRLEN', jkey(id), 'in')))
end

-- Set when a job's record dies, and index it there (the `exp` zset lists every record).
local function expire_at(id, at)
  redis.call('PEXPIREAT', jkey(id), at)
  redis.call('ZADD', P .. 'exp', at, id)
end

-- Count an event in the 10 s history interval holding `now` (ms): `lg:{ep}:iv:<t>`.
local INTERVAL_KEEP = 900000
-- The first count of each field sets the key's life (the first count of all created it).
local function count_interval(now, field)
  local k = P .. 'iv:' .. (math.floor(now / 10000) * 10)
  if redis.call('HINCRBY', k, field, 1) == 1 then redis.call('PEXPIRE', k, INTERVAL_KEEP) end
end

-- The log bucket of a queue delay or an execution time (ms): buckets 10 % wide, so
-- percentiles read from them are within 5 % (history.lua turns a bucket back into its middle).
local function delay_bucket(ms)
  return math.floor(math.log(math.max(ms, 0) + 1) / math.log(1.1))
end

-- The `d:` event of a job that ended: `d:<ep>:<id>`, followed, when its output and error
-- hold at most DONE_CARRIED bytes, by its final record, so a waiter answers without
-- reading it (store/records.py `JobRecord.from_event` reads it):
-- "\n<status> <created> <ttl> <queued> <started or -> <finished> <error bytes or -1>
-- <1 with an output, else 0>\n<error><output>".
local DONE_CARRIED = 8192
local function done_event(ep, id)
  local event = 'd:' .. ep .. ':' .. id
  local r = redis.call('HMGET', jkey(id), 'st', 'cr', 'tl', 'qd', 'sa', 'fi', 'err', 'out')
  local err, out = r[7], r[8]
  if not r[1] or (err and #err or 0) + (out and #out or 0) > DONE_CARRIED then return event end
  local head = {r[1], r[2], r[3], r[4], r[5] or '-', r[6], err and #err or -1, out and 1 or 0}
  return event .. '\n' .. table.concat(head, ' ') .. '\n' .. (err or '') .. (out or '')
end

-- A job's attempts (`ah`): a JSON list of its last ATTEMPTS_KEPT takes, oldest first, each
-- {w = worker, t = taken at (ms)} and, once it ended, e = ended at (ms) and o = how:
-- COMPLETED, FAILED (the handler's result), TIMED_OUT, CANCELLED, WORKER_LOST (its worker
-- was lost or did not list it: requeued, or failed out of attempts or by the endpoint's
-- onWorkerLost policy) or GIVEN_BACK (its worker, told to stop, exited before running it).
-- Written by the scripts that take and end jobs: no round trip of its own.
local ATTEMPTS_KEPT = 10
-- The attempt history `raw` (the record's `ah` as the caller read it) with a take by
-- `worker` at `now`, for the caller's own write of the record.
local function with_take(raw, worker, now)
  local list = raw and cjson.decode(raw) or {}
  list[#list + 1] = {w = worker, t = now}
  while #list > ATTEMPTS_KEPT do table.remove(list, 1) end
  return cjson.encode(list)
end
-- The attempt history `raw` with its newest attempt ended at `now` as `how`; nil when it
-- has no open attempt (nothing to write).
local function with_end(raw, now, how)
  if not raw then return nil end
  local list = cjson.decode(raw)
  local last = list[#list]
  if not last or last.e then return nil end
  last.e, last.o = now, how
  return cjson.encode(list)
end
-- End the job's newest attempt, if it is still open (a requeue: no read of its own).
local function attempt_ended(id, now, how)
  local ended = with_end(redis.call('HGET', jkey(id), 'ah'), now, how)
  if ended then redis.call('HSET', jkey(id), 'ah', ended) end
end

-- The field counting a job that ended in each final state in its history interval.
local ENDED = {COMPLETED = 'c', FAILED = 'f', TIMED_OUT = 't', CANCELLED = 'k'}

-- Move a job into a final state: release its worker slot, count it, keep it for the
-- retention (never beyond its ttl), queue its webhook, and wake its waiters (/runsync,
-- and `/status?wait=` on a job it marked watched).
local function finalize(ep, id, status, now, worker, sync, ret_run, ret_sync, extra)
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'cr', 'tl', 'wh', 'wt', 'sa', 'ah')
  local ended = f[1] == 'IN_PROGRESS' and with_end(f[7], now, status) or nil
  reindex(id, f[1], status)
  if ended then  -- the attempt's end rides on the state's write
    redis.call('HSET', jk, 'st', status, 'fi', now, 'ah', ended, unpack(extra))
  else
    redis.call('HSET', jk, 'st', status, 'fi', now, unpack(extra))
  end
  redis.call('HDEL', jk, 'pg')  -- progress is shown while running only
  redis.call('ZREM', P .. 'run', id)
  if worker then redis.call('SREM', P .. 'wj:' .. worker, id) end
  if status == 'COMPLETED' then
    redis.call('HINCRBY', P .. 'stats', 'completed', 1)
  elseif status == 'FAILED' or status == 'TIMED_OUT' then
    redis.call('HINCRBY', P .. 'stats', 'failed', 1)
  end
  count_interval(now, ENDED[status])
  if f[6] and status ~= 'CANCELLED' then  -- the execution time of a job that ran and ended
    count_interval(now, 'x' .. delay_bucket(now - tonumber(f[6])))
  end
  local death = math.min(now + tonumber(sync == '1' and ret_sync or ret_run),
    tonumber(f[2]) + tonumber(f[3]))
  expire_at(id, death)
  redis.call('PEXPIREAT', P .. 's:' .. id, death)
  if f[4] then redis.call('ZADD', P .. 'wh', now, id) end
  if sync == '1' or f[5] then redis.call('PUBLISH', EVENTS, done_event(ep, id)) end
end

-- Ask a worker to stop a job it holds, and wake its job-stop long-poll.
local function signal_stop(ep, worker, id)
  local sk = P .. 'stop:' .. worker
  redis.call('RPUSH', sk, id)
  redis.call('PEXPIRE', sk, 3600000)
  redis.call('SADD', P .. 'wx:' .. worker, id)
  redis.call('PEXPIRE', P .. 'wx:' .. worker, STOPPED_RUNNING_MS)
  redis.call('PUBLISH', EVENTS, 's:' .. ep .. ':' .. worker)
end

-- The endpoint's onWorkerLost policy (`lost`: p = requeue or fail, n = requeueMaxRunS in
-- ms; no key: requeue every job; store/registry.py writes it with the registry entry):
-- the error ending a lost worker's job FAILED instead of running it again, or nil to
-- requeue it. The error starts with WORKER_LOST (models/endpoint.py).
local function lost_policy_error(id, now)
  local pol = redis.call('HMGET', P .. 'lost', 'p', 'n')
  if not pol[1] then return nil end
  local started = tonumber(redis.call('HGET', jkey(id), 'sa')) or now
  local ran = math.max(now - started, 0)
  local s = string.format('%.0f', math.floor(ran / 1000))
  if pol[1] == 'fail' then
    return 'WORKER_LOST: the worker running this job was lost after ' .. s ..
      ' s (onWorkerLost: fail)'
  end
  local max_ms = tonumber(pol[2]) or 0
  if max_ms > 0 and ran >= max_ms then
    return 'WORKER_LOST: the worker running this job was lost after ' .. s ..
      ' s (onWorkerLost: requeue, requeueMaxRunS ' .. string.format('%.0f', max_ms / 1000) ..
      ': only shorter runs are requeued)'
  end
  return nil
end

-- Take a job away from a worker that lost it: back to the front of its queue (counted as
-- retried), or FAILED when its attempts are used up. f = HMGET st wk at sq lp sy.
-- `clean`: the worker exited cleanly when told to stop, so it never ran the job: the job
-- goes back without using an attempt and is not counted as retried.
-- `lost`: the worker itself was lost while holding the job (silent past the heartbeat
-- timeout, its process or pod gone: `release`), so the endpoint's onWorkerLost policy
-- applies: the job may end FAILED WORKER_LOST instead of running again. Not for a job
-- whose take never reached its worker (reconcile.lua): that one never ran.
-- Either way the attempt ends as WORKER_LOST (GIVEN_BACK when clean).
-- Returns 1 when requeued, 0 when failed.
local function requeue(ep, id, f, now, max_attempts, ret_run, ret_sync, reason, clean, lost)
  attempt_ended(id, now, clean and 'GIVEN_BACK' or 'WORKER_LOST')
  local failed = lost and not clean and lost_policy_error(id, now) or nil
  if not failed and not clean and (tonumber(f[3]) or 0) >= max_attempts then failed = reason end
  if failed then
    finalize(ep, id, 'FAILED', now, f[2], f[6], ret_run, ret_sync, {'err', failed})
    return 0
  end
  local jk = jkey(id)
  redis.call('ZREM', P .. 'run', id)
  redis.call('SREM', P .. 'wj:' .. f[2], id)
  redis.call('HDEL', jk, 'wk', 'sa', 'sb', 'pg')
  reindex(id, f[1], 'IN_QUEUE')
  redis.call('HSET', jk, 'st', 'IN_QUEUE')
  local c = redis.call('HMGET', jk, 'cr', 'tl')
  expire_at(id, tonumber(c[1]) + tonumber(c[2]))
  redis.call('DEL', P .. 's:' .. id)
  redis.call('ZADD', P .. (f[5] == '1' and 'ql' or 'q'), tonumber(f[4]), id)
  count_queued(id, 1)
  if clean then
    redis.call('HINCRBY', jk, 'at', -1)
  else
    redis.call('HINCRBY', P .. 'stats', 'retried', 1)
  end
  redis.call('PUBLISH', EVENTS, 'q:' .. ep)
  return 1
end

local HELD = {'st', 'wk', 'at', 'sq', 'lp', 'sy'}

-- Forget a worker; give back every job it held (lost with it unless `clean`: the
-- endpoint's onWorkerLost policy applies). Returns {requeued, failed}.
local function release(ep, worker, now, max_attempts, ret_run, ret_sync, reason, clean)
  local wk = P .. 'wj:' .. worker
  local requeued, failed = 0, 0
  for _, id in ipairs(redis.call('SMEMBERS', wk)) do
    local f = redis.call('HMGET', jkey(id), unpack(HELD))
    if f[1] == 'IN_PROGRESS' and f[2] == worker then
      local r = requeue(ep, id, f, now, max_attempts, ret_run, ret_sync, reason, clean, true)
      requeued, failed = requeued + r, failed + 1 - r
    end
  end
  redis.call('DEL', wk, P .. 'stop:' .. worker, P .. 'wx:' .. worker)
  redis.call('ZREM', P .. 'w', worker)
  redis.call('HDEL', P .. 'wst', worker)
  redis.call('HDEL', P .. 'wfc', worker)
  redis.call('HDEL', P .. 'wu', worker)
  return {requeued, failed}
end

-- A worker id released for good (its process or pod is gone): whatever still speaks with
-- it (an orphaned heartbeat process) must not register it again nor vouch for jobs.
local function gone(worker, now)
  local until_ms = redis.call('ZSCORE', P .. 'gone', worker)
  return until_ms and tonumber(until_ms) > now
end

-- Jobs a worker runs: those it holds, plus those it was told to stop whose handler has not
-- returned yet (see STOPPED_RUNNING_MS).
local function load_of(worker)
  return redis.call('SCARD', P .. 'wj:' .. worker) + redis.call('SCARD', P .. 'wx:' .. worker)
end

-- Workers' starts not yet matched by a first call (`wst`: worker -> ms) and first calls
-- not yet matched by a start (`wfc`), see worker_started.lua; an entry leaves when matched
-- or when its worker is released, each hash dies COLD_START_KEEP after its last write.
local COLD_START_KEEP = 3600000

-- A worker is ready for real work (its first call, or the end of its warm-up): its
-- cold-start time (from its start, as its control plane reported it, to now) is counted in
-- bucket `b<bucket>`; with no start reported yet, now is kept for worker_started.lua.
local function first_call(worker, now)
  local start = redis.call('HGET', P .. 'wst', worker)
  if start then
    redis.call('HDEL', P .. 'wst', worker)
    count_interval(now, 'b' .. delay_bucket(now - tonumber(start)))
  else
    redis.call('HSET', P .. 'wfc', worker, now)
    redis.call('PEXPIRE', P .. 'wfc', COLD_START_KEEP)
  end
end

-- A worker's heartbeat. A worker new to the endpoint announces it on `lg:events` (`a:<ep>`):
-- every gateway process looks after the endpoint again (gateway/activity.py), and is
-- counted as a cold start in its history interval (`s`; a worker forgotten after missing
-- its heartbeats and heard from again counts again). On an endpoint with a warm-up (`wun`:
-- its count of job inputs, written with the registry entry) it starts warming (`wu`, see
-- take.lua): its cold start ends when its warm-up does (warmup_done.lua); else now.
local function beat(worker, now)
  if redis.call('ZADD', P .. 'w', now, worker) == 1 then
    redis.call('PUBLISH', EVENTS, 'a:' .. string.sub(P, 5, -3))
    count_interval(now, 's')
    local warmups = tonumber(redis.call('GET', P .. 'wun'))
    if warmups and warmups > 0 then
      redis.call('HSET', P .. 'wu', worker, cjson.encode({i = 0, n = warmups}))
    else
      first_call(worker, now)
    end
  end
end

-- Workers heard from within `timeout` ms, and how many of them hold a job: {ids}, busy.
local function live_workers(now, timeout)
  local alive, busy = redis.call('ZRANGEBYSCORE', P .. 'w', now - timeout, '+inf'), 0
  for _, w in ipairs(alive) do
    if load_of(w) > 0 then busy = busy + 1 end
  end
  return alive, busy
end
