-- Counts for /health and /metrics. Arguments: store/args_workers.py Snapshot.
-- Returns {inQueue, inQueueLow, inProgress, idle, running, completed, failed, retried,
--          oldest queued ms or -1, oldest lowPriority queued ms or -1,
--          workers initializing, throttled, unhealthy (as last reported, else 0, plus
--          the workers marked unhealthy whose pod or process is still there: `unp`),
--          requests held, requests in flight (load-balancing endpoints, else 0),
--          then worker id, jobs (or requests) held, ... for every live worker: -1 for one
--          warming up (take.lua), counted initializing rather than idle}.
-- A load-balancing worker (`lbw`) counts by its polled health (`lbh`): healthy is idle or
-- running (requests in flight), initializing, or unhealthy; gateways report their held
-- and in-flight requests in `lbr`, an expired report counts for nothing.
local function oldest(q)
  local head = redis.call('ZRANGE', q, 0, 0)
  if #head == 0 then return -1 end
  return tonumber(redis.call('HGET', jkey(head[1]), F_QUEUED)) or -1
end
local alive, busy, loads = live_workers(now, timeout)
local held, warming = {}, 0
local any_warming = redis.call('EXISTS', P .. 'wu') == 1
for i, w in ipairs(alive) do
  held[#held + 1] = w
  if any_warming and redis.call('HEXISTS', P .. 'wu', w) == 1 then  -- initializing, held -1
    warming = warming + 1
    held[#held + 1] = -1
  else
    held[#held + 1] = loads[i]
  end
end
local lb_held, lb_flight, per_worker = 0, 0, {}
local reports = redis.call('HGETALL', P .. 'lbr')
for i = 1, #reports, 2 do
  local r = cjson.decode(reports[i + 1])
  if tonumber(r.exp) >= now then
    lb_held = lb_held + tonumber(r.held)
    for w, n in pairs(r.flight) do
      per_worker[w] = (per_worker[w] or 0) + tonumber(n)
      lb_flight = lb_flight + tonumber(n)
    end
  end
end
local lb_idle, lb_busy, lb_init, lb_bad = 0, 0, 0, 0
for _, w in ipairs(redis.call('HKEYS', P .. 'lbw')) do
  local h = redis.call('HGET', P .. 'lbh', w)
  local state, at = nil, nil
  if h then state, at = string.match(h, '^(%a+) %-?%d+ (%d+)$') end
  if not state or tonumber(at) < now - stale then state = 'initializing' end
  local n = per_worker[w] or 0
  if state == 'healthy' then
    if n > 0 then lb_busy = lb_busy + 1 else lb_idle = lb_idle + 1 end
  elseif state == 'unhealthy' then
    lb_bad = lb_bad + 1
  else
    lb_init = lb_init + 1
  end
  held[#held + 1] = w
  held[#held + 1] = n
end
local s = redis.call('HMGET', P .. 'stats', 'completed', 'failed', 'retried')
local out = {redis.call('ZCARD', P .. 'q'), redis.call('ZCARD', P .. 'ql'),
  redis.call('ZCARD', P .. 'run'), #alive - warming - busy + lb_idle, busy + lb_busy,
  tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0,
  oldest(P .. 'q'), oldest(P .. 'ql')}
local ws = redis.call('HMGET', P .. 'ws', 'initializing', 'throttled', 'unhealthy')
out[#out + 1] = (tonumber(ws[1]) or 0) + lb_init + warming
out[#out + 1] = tonumber(ws[2]) or 0
local marked = redis.call('ZCOUNT', P .. 'unp', now - unhealthy_keep, '+inf')
out[#out + 1] = (tonumber(ws[3]) or 0) + lb_bad + marked
out[#out + 1] = lb_held
out[#out + 1] = lb_flight
for _, v in ipairs(held) do out[#out + 1] = v end
return out
