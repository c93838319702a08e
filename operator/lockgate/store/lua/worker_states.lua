-- Report the worker states the gateway cannot see for itself (the operator from pod
-- state, dev mode from its processes). ARGV: initializing, throttled, unhealthy, ttl (ms):
-- the counts vanish when the reporter stops reporting.
-- No state to report is no key (an idle endpoint stays quiet); a first report announces the
-- endpoint (`a:<ep>`): gateways look after it again.
local k = P .. 'ws'
if ARGV[1] == '0' and ARGV[2] == '0' and ARGV[3] == '0' then
  redis.call('DEL', k)
  return 1
end
if redis.call('EXISTS', k) == 0 then
  redis.call('PUBLISH', EVENTS, 'a:' .. string.sub(P, 5, -3))
end
redis.call('HSET', k, 'initializing', ARGV[1], 'throttled', ARGV[2], 'unhealthy', ARGV[3])
redis.call('PEXPIRE', k, ARGV[4])
return 1
