-- A worker is gone (its process exited, its pod was deleted): forget it, give back the
-- jobs it held, and remember the id as gone for `gone_ms`, so that nothing speaking with
-- it any more (an orphaned heartbeat process) registers it again or keeps a job alive.
-- ARGV: ep, worker, now, max attempts, retention run, retention sync, reason, clean ("1":
-- it exited cleanly when told to stop: its jobs go back without using an attempt), gone ms.
-- Returns {requeued, failed}.
local worker, now = ARGV[2], tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', P .. 'gone', '-inf', now)
redis.call('ZADD', P .. 'gone', now + tonumber(ARGV[9]), worker)
redis.call('PEXPIRE', P .. 'gone', tonumber(ARGV[9]))
return release(ARGV[1], worker, now, tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7],
  ARGV[8] == '1')
