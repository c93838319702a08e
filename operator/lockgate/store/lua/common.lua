-- Shared by every script (prepended at load time, after the constants store/lua_preamble.py
-- generates from store/keys.py and store/records.py: EVENTS, RUNNING_GRACE, INDEX_MAX_AGE,
-- STOPPED_RUNNING_MS, ORDER_SLOTS, STATES, INTERVAL_S, INTERVAL_KEEP, DONE_CARRIED,
-- ATTEMPTS_KEPT, COLD_START_KEEP, ENDED, the record's field lists and its field names
-- F_<NAME>; the script's arguments follow as named locals, store/script_args.py).
-- KEYS[1] is the endpoint's key prefix `lg:{ep}:`; per-job and per-worker keys are
-- derived from it (see store/keys.py).
local P = KEYS[1]
-- A job a worker was told to stop stays in `wx:<worker>` (the worker counts as busy: a sync
-- handler cannot be interrupted) until its ping no longer lists it (STOPPED_RUNNING_MS).

local function jkey(id) return P .. 'j:' .. id end

-- The listing index of GET /requests (list_jobs.lua): one zset per state, `ix:<state>`,
-- holding each job under its current state with a fixed score, its place in time:
-- createdAt (ms) * ORDER_SLOTS + submission sequence mod ORDER_SLOTS (unique per job
-- unless ORDER_SLOTS jobs are submitted within one ms). STATES: every job state.

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
  redis.call('INCRBY', P .. 'qb', sign * (size or redis.call('HSTRLEN', jkey(id), F_INPUT)))
end

-- Set when a job's record dies, and index it there (the `exp` zset lists every record).
local function expire_at(id, at)
  redis.call('PEXPIREAT', jkey(id), at)
  redis.call('ZADD', P .. 'exp', at, id)
end

-- Count an event in the history interval (INTERVAL_S) holding `now` (ms): `lg:{ep}:iv:<t>`.
-- The first count of each field sets the key's life (INTERVAL_KEEP, ms; the first count of
-- all created it).
local function count_interval(now, field)
  local k = P .. 'iv:' .. (math.floor(now / (INTERVAL_S * 1000)) * INTERVAL_S)
  if redis.call('HINCRBY', k, field, 1) == 1 then redis.call('PEXPIRE', k, INTERVAL_KEEP) end
end

-- The log bucket of a queue delay or an execution time (ms): buckets 10 % wide, so
-- percentiles read from them are within 5 % (history.lua turns a bucket back into its middle).
local function delay_bucket(ms)
  return math.floor(math.log(math.max(ms, 0) + 1) / math.log(1.1))
end

-- The `d:` event of a job that ended: `d:<ep>:<id>`, followed, when its output and error
-- hold at most DONE_CARRIED bytes, by its final record, so a waiter answers without
-- reading it (store/records.py `JobRecord.from_event` reads it): "\n<the DONE_HEAD
-- fields, - for none> <error bytes or -1> <1 with an output, else 0>\n<error><output>".
local function done_event(ep, id)
  local event = 'd:' .. ep .. ':' .. id
  local r = redis.call('HMGET', jkey(id), F_ERROR, F_OUTPUT, unpack(DONE_HEAD))
  local err, out, status = r[1], r[2], r[3]
  if not status or (err and #err or 0) + (out and #out or 0) > DONE_CARRIED then return event end
  local head = {}
  for i = 1, #DONE_HEAD do head[i] = r[i + 2] or '-' end
  head[#head + 1] = err and #err or -1
  head[#head + 1] = out and 1 or 0
  return event .. '\n' .. table.concat(head, ' ') .. '\n' .. (err or '') .. (out or '')
end

-- A job's attempts (`ah`): a JSON list of its last ATTEMPTS_KEPT takes, oldest first, each
-- {w = worker, t = taken at (ms)} and, once it ended, e = ended at (ms) and o = how:
-- COMPLETED, FAILED (the handler's result), TIMED_OUT, CANCELLED, WORKER_LOST (its worker
-- was lost or did not list it: requeued, or failed out of attempts or by the endpoint's
-- onWorkerLost policy) or GIVEN_BACK (its worker, told to stop, exited before running it).
-- Written by the scripts that take and end jobs: no round trip of its own.
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
  local ended = with_end(redis.call('HGET', jkey(id), F_ATTEMPT_LOG), now, how)
  if ended then redis.call('HSET', jkey(id), F_ATTEMPT_LOG, ended) end
end

-- ENDED: the field counting a job that ended in each final state in its history interval.
-- Move a job into a final state: release its worker slot, count it, keep it for the
-- retention (never beyond its ttl), queue its webhook, and wake its waiters (/runsync,
-- and `/status?wait=` on a job it marked watched).
-- `read`: the record's FINALIZE_READS fields when the caller read them already (in that
-- order), else nil: read here.
local FINALIZE_READS = {F_STATUS, F_CREATED, F_TTL, F_WEBHOOK, F_WATCHED, F_STARTED,
  F_ATTEMPT_LOG, F_PROGRESS, F_STREAM_BYTES}
local function finalize(ep, id, status, now, worker, sync, ret_run, ret_sync, extra, read)
  local jk = jkey(id)
  local st, created, ttl, webhook, watched, started, log, progress, streamed = unpack(
    read or redis.call('HMGET', jk, unpack(FINALIZE_READS)), 1, #FINALIZE_READS)
  local ended = st == 'IN_PROGRESS' and with_end(log, now, status) or nil
  reindex(id, st, status)
  if ended then  -- the attempt's end rides on the state's write
    redis.call('HSET', jk, F_STATUS, status, F_FINISHED, now, F_ATTEMPT_LOG, ended, unpack(extra))
  else
    redis.call('HSET', jk, F_STATUS, status, F_FINISHED, now, unpack(extra))
  end
  if progress then redis.call('HDEL', jk, F_PROGRESS) end  -- shown while running only
  redis.call('ZREM', P .. 'run', id)
  if worker then redis.call('SREM', P .. 'wj:' .. worker, id) end
  if status == 'COMPLETED' then
    redis.call('HINCRBY', P .. 'stats', 'completed', 1)
  elseif status == 'FAILED' or status == 'TIMED_OUT' then
    redis.call('HINCRBY', P .. 'stats', 'failed', 1)
  end
  count_interval(now, ENDED[status])
  if started and status ~= 'CANCELLED' then  -- the execution time of a job that ran and ended
    count_interval(now, 'x' .. delay_bucket(now - tonumber(started)))
  end
  local death = math.min(now + tonumber(sync == '1' and ret_sync or ret_run),
    tonumber(created) + tonumber(ttl))
  expire_at(id, death)
  -- Unread stream chunks (`s:`) exist only while the record counts them (`sb`).
  if streamed then redis.call('PEXPIREAT', P .. 's:' .. id, death) end
  if webhook then redis.call('ZADD', P .. 'wh', now, id) end
  if sync == '1' or watched then redis.call('PUBLISH', EVENTS, done_event(ep, id)) end
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
  local started = tonumber(redis.call('HGET', jkey(id), F_STARTED)) or now
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
-- retried), or FAILED when its attempts are used up. `j`: the job as `held_job` read it.
-- `clean`: the worker exited cleanly when told to stop, so it never ran the job: the job
-- goes back without using an attempt and is not counted as retried.
-- `lost`: the worker itself was lost while holding the job (silent past the heartbeat
-- timeout, its process or pod gone: `release`), so the endpoint's onWorkerLost policy
-- applies: the job may end FAILED WORKER_LOST instead of running again. Not for a job
-- whose take never reached its worker (reconcile.lua): that one never ran.
-- Either way the attempt ends as WORKER_LOST (GIVEN_BACK when clean).
-- Returns 1 when requeued, 0 when failed.
local function requeue(ep, id, j, now, max_attempts, ret_run, ret_sync, reason, clean, lost)
  attempt_ended(id, now, clean and 'GIVEN_BACK' or 'WORKER_LOST')
  local failed = lost and not clean and lost_policy_error(id, now) or nil
  if not failed and not clean and (tonumber(j.attempts) or 0) >= max_attempts then
    failed = reason
  end
  if failed then
    finalize(ep, id, 'FAILED', now, j.worker, j.sync, ret_run, ret_sync, {F_ERROR, failed})
    return 0
  end
  local jk = jkey(id)
  redis.call('ZREM', P .. 'run', id)
  redis.call('SREM', P .. 'wj:' .. j.worker, id)
  redis.call('HDEL', jk, F_WORKER, F_STARTED, F_STREAM_BYTES, F_PROGRESS)
  reindex(id, j.status, 'IN_QUEUE')
  redis.call('HSET', jk, F_STATUS, 'IN_QUEUE')
  local created, ttl = unpack(redis.call('HMGET', jk, F_CREATED, F_TTL))
  expire_at(id, tonumber(created) + tonumber(ttl))
  redis.call('DEL', P .. 's:' .. id)
  redis.call('ZADD', P .. (j.low == '1' and 'ql' or 'q'), tonumber(j.seq), id)
  count_queued(id, 1)
  if clean then
    redis.call('HINCRBY', jk, F_ATTEMPTS, -1)
  else
    redis.call('HINCRBY', P .. 'stats', 'retried', 1)
  end
  redis.call('PUBLISH', EVENTS, 'q:' .. ep)
  return 1
end

-- What `requeue` needs of a job a worker holds, by name, in one HMGET.
local function held_job(id)
  local st, wk, at, sq, lp, sy = unpack(redis.call('HMGET', jkey(id), F_STATUS, F_WORKER,
    F_ATTEMPTS, F_SEQ, F_LOW_PRIORITY, F_SYNC))
  return {status = st, worker = wk, attempts = at, seq = sq, low = lp, sync = sy}
end

-- Forget a worker; give back every job it held (lost with it unless `clean`: the
-- endpoint's onWorkerLost policy applies). Returns {requeued, failed}.
local function release(ep, worker, now, max_attempts, ret_run, ret_sync, reason, clean)
  local wk = P .. 'wj:' .. worker
  local requeued, failed = 0, 0
  for _, id in ipairs(redis.call('SMEMBERS', wk)) do
    local j = held_job(id)
    if j.status == 'IN_PROGRESS' and j.worker == worker then
      local r = requeue(ep, id, j, now, max_attempts, ret_run, ret_sync, reason, clean, true)
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
-- or when its worker is released, each hash dies COLD_START_KEEP (ms) after its last write.

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
-- Returns true when it started the worker's warm-up.
local function beat(worker, now)
  if redis.call('ZADD', P .. 'w', now, worker) == 1 then
    redis.call('PUBLISH', EVENTS, 'a:' .. string.sub(P, 5, -3))
    count_interval(now, 's')
    local warmups = tonumber(redis.call('GET', P .. 'wun'))
    if warmups and warmups > 0 then
      redis.call('HSET', P .. 'wu', worker, cjson.encode({i = 0, n = warmups}))
      return true
    end
    first_call(worker, now)
  end
  return false
end

-- Workers heard from within `timeout` ms, and how many of them hold a job: {ids}, busy,
-- and each one's load_of (in the order of the ids).
local function live_workers(now, timeout)
  local alive, busy = redis.call('ZRANGEBYSCORE', P .. 'w', now - timeout, '+inf'), 0
  local loads = {}
  for i, w in ipairs(alive) do
    loads[i] = load_of(w)
    if loads[i] > 0 then busy = busy + 1 end
  end
  return alive, busy, loads
end

-- A key of batch `batch` (Batch Jobs, store/batches.py): its record (BP_RECORD) or one of
-- its parts (BP_<PART>): `lg:{ep}:bj<part>:<batch>`.
local function bkey(batch, part)
  return P .. BATCH_KEY .. part .. ':' .. batch
end
