-- Report the worker states the gateway cannot see for itself (the operator from pod
-- state, dev mode from its processes). ARGV: initializing, throttled, unhealthy, ttl (ms):
-- the counts vanish when the reporter stops reporting.
local k = P .. 'ws'
redis.call('HSET', k, 'initializing', ARGV[1], 'throttled', ARGV[2], 'unhealthy', ARGV[3])
redis.call('PEXPIRE', k, ARGV[4])
return 1
