-- Warm-up jobs past their deadline (handed at + the endpoint's execution timeout): their
-- workers are to be marked unhealthy. Each is reported once per `again` ms (several
-- gateways sweep; a mark that failed is retried). Arguments: store/args_workers.py
-- WarmupOverdue.
-- Returns {worker, warm-up input index, ...}.
local out = {}
local flat = redis.call('HGETALL', P .. 'wu')
for i = 1, #flat, 2 do
  local s = cjson.decode(flat[i + 1])
  if s.d and s.d < now and (not s.x or s.x < now - again) then
    s.x = now
    redis.call('HSET', P .. 'wu', flat[i], cjson.encode(s))
    out[#out + 1] = flat[i]
    out[#out + 1] = s.i
  end
end
return out
