-- Remove every key of an endpoint: queues, jobs (the `exp` index lists them), streams,
-- workers, counters, builds and their logs. Used when an Endpoint is deleted ("removes job history").
-- Returns the number of jobs removed.
local ids = redis.call('ZRANGE', P .. 'exp', 0, -1)
for i = 1, #ids, 500 do
  local batch = {}
  for j = i, math.min(i + 499, #ids) do
    batch[#batch + 1] = jkey(ids[j])
    batch[#batch + 1] = P .. 's:' .. ids[j]
  end
  redis.call('UNLINK', unpack(batch))
end
for _, w in ipairs(redis.call('ZRANGE', P .. 'w', 0, -1)) do
  redis.call('UNLINK', P .. 'wj:' .. w, P .. 'stop:' .. w, P .. 'wx:' .. w)
end
redis.call('UNLINK', P .. 'q', P .. 'ql', P .. 'run', P .. 'exp', P .. 'w', P .. 'seq',
  P .. 'stats', P .. 'wh', P .. 'wha', P .. 'sweep', P .. 'qb', P .. 'stopping', P .. 'gone',
  P .. 'refresh', P .. 'hist', P .. 'hist1m', P .. 'ws', P .. 'wst', P .. 'wfc', P .. 'un',
  P .. 'unp', P .. 'rel', P .. 'relv', P .. 'lost', P .. 'wu', P .. 'wun', P .. 'lbw', P .. 'lbh',
  P .. 'lbr', P .. 'lbp', P .. 'lbpw', P .. 'lbu')
for _, b in ipairs(redis.call('ZRANGE', P .. 'bld', 0, -1)) do
  redis.call('UNLINK', P .. 'b:' .. b, P .. 'bl:' .. b, P .. 'blc:' .. b)
end
redis.call('UNLINK', P .. 'bld', P .. 'bldn', P .. 'bhk')
for _, s in ipairs(STATES) do redis.call('UNLINK', P .. 'ix:' .. s) end
-- History intervals still alive (now_s: now in epoch seconds): named, never scanned.
-- Arguments: store/args_workers.py DeleteEndpoint.
local t = math.floor(now_s / INTERVAL_S) * INTERVAL_S
local keep_s = INTERVAL_KEEP / 1000
for s = t - keep_s, t + INTERVAL_S, INTERVAL_S do redis.call('UNLINK', P .. 'iv:' .. s) end
return #ids
