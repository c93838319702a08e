-- A warm-up job's result (see take.lua). Arguments: store/args_workers.py WarmupDone
-- (failed "1": the caller marks the worker unhealthy, which releases it and its `wu` entry).
-- Returns 0 (not the worker's current warm-up job: ignored), -1 (failed), 1 (the next
-- input is due) or 2 (warmed up: its cold start ends now and real jobs come next).
local raw = redis.call('HGET', P .. 'wu', worker)
if not raw then return 0 end
local s = cjson.decode(raw)
if s.j ~= job then return 0 end
if failed == '1' then return -1 end
if s.i + 1 < s.n then
  redis.call('HSET', P .. 'wu', worker, cjson.encode({i = s.i + 1, n = s.n}))
  return 1
end
redis.call('HDEL', P .. 'wu', worker)
first_call(worker, now)
return 2
