-- Report the worker states the gateway cannot see for itself (the operator from pod
-- state, dev mode from its processes). Arguments: store/args_workers.py WorkerStates: the
-- counts vanish `ttl` ms after the last report.
-- No state to report is no key (an idle endpoint stays quiet); a first report announces the
-- endpoint (`a:<ep>`): gateways look after it again.
local k = P .. 'ws'
if initializing == 0 and throttled == 0 and unhealthy == 0 then
  redis.call('DEL', k)
  return 1
end
if redis.call('EXISTS', k) == 0 then
  redis.call('PUBLISH', EVENTS, 'a:' .. ep)
end
redis.call('HSET', k, 'initializing', initializing, 'throttled', throttled, 'unhealthy',
  unhealthy)
redis.call('PEXPIRE', k, ttl)
return 1
