-- Rate and concurrency limit of one operation for one key owner (see store/limits.py).
-- ARGV: operation, owner, now (ms), window (ms), rate (-1: none), concurrency (-1: none),
--       token, lease (ms).
-- Returns {verdict, retry_after_ms}: verdict 2 admitted (the request counts and, with a
-- concurrency limit, holds `token` until released or the lease ends), 0 refused by the
-- rate, 1 refused by the concurrency. A refused request is not counted.
local now, window = tonumber(ARGV[3]), tonumber(ARGV[4])
local rate, conc, lease = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[8])
local start = now - now % window
local ck = P .. 'rl:' .. ARGV[1] .. ':' .. ARGV[2] .. ':' .. start
local fk = P .. 'rc:' .. ARGV[1] .. ':' .. ARGV[2]
if rate >= 0 and (tonumber(redis.call('GET', ck)) or 0) >= rate then
  return {0, start + window - now}
end
if conc >= 0 then
  redis.call('ZREMRANGEBYSCORE', fk, '-inf', now)
  if redis.call('ZCARD', fk) >= conc then return {1, 1000} end
  redis.call('ZADD', fk, now + lease, ARGV[7])
  redis.call('PEXPIRE', fk, lease)
end
if rate >= 0 and redis.call('INCR', ck) == 1 then
  -- 1 s past the window's end: replicas whose clocks lag a little still find the count.
  redis.call('PEXPIRE', ck, start + window - now + 1000)
end
return {2, 0}
