-- Counts for /health and /metrics. ARGV: now, heartbeat timeout (ms).
-- Returns {inQueue, inQueueLow, inProgress, idle, running, completed, failed, retried,
--          oldest queued ms or -1, oldest lowPriority queued ms or -1,
--          workers initializing, throttled, unhealthy (as last reported, else 0),
--          then worker id, jobs held, ... for every live worker}.
local now, timeout = tonumber(ARGV[1]), tonumber(ARGV[2])
local function oldest(q)
  local head = redis.call('ZRANGE', q, 0, 0)
  if #head == 0 then return -1 end
  return tonumber(redis.call('HGET', jkey(head[1]), 'qd')) or -1
end
local alive, busy = live_workers(now, timeout)
local held = {}
for _, w in ipairs(alive) do
  held[#held + 1] = w
  held[#held + 1] = load_of(w)
end
local s = redis.call('HMGET', P .. 'stats', 'completed', 'failed', 'retried')
local out = {redis.call('ZCARD', P .. 'q'), redis.call('ZCARD', P .. 'ql'),
  redis.call('ZCARD', P .. 'run'), #alive - busy, busy,
  tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0,
  oldest(P .. 'q'), oldest(P .. 'ql')}
local ws = redis.call('HMGET', P .. 'ws', 'initializing', 'throttled', 'unhealthy')
for i = 1, 3 do out[#out + 1] = tonumber(ws[i]) or 0 end
for _, v in ipairs(held) do out[#out + 1] = v end
return out
