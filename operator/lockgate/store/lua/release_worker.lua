-- A worker is gone (its process exited): forget it and give back the jobs it held.
-- ARGV: ep, worker, now, max attempts, retention run, retention sync, reason.
-- Returns {requeued, failed}.
return release(ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6],
  ARGV[7])
