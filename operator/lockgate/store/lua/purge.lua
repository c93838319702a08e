-- /purge-queue: remove every queued job (records too); running jobs are untouched.
-- Returns the number removed. Records are UNLINKed in batches (freed off the main thread).
-- A /runsync waiting for a purged job is woken to answer 404 at once.
-- Arguments: store/args_jobs.py Purge.
local removed = 0
for _, q in ipairs({P .. 'q', P .. 'ql'}) do
  local ids = redis.call('ZRANGE', q, 0, -1)
  for i = 1, #ids, 1000 do
    local batch, members = {}, {}
    for j = i, math.min(i + 999, #ids) do
      batch[#batch + 1] = jkey(ids[j])
      members[#members + 1] = ids[j]
      if string.sub(ids[j], 1, 5) == 'sync-' then
        redis.call('PUBLISH', EVENTS, 'd:' .. ep .. ':' .. ids[j])
      end
    end
    redis.call('UNLINK', unpack(batch))
    redis.call('ZREM', P .. 'exp', unpack(members))
    redis.call('ZREM', P .. 'ix:IN_QUEUE', unpack(members))
  end
  removed = removed + #ids
  redis.call('UNLINK', q)
end
redis.call('DEL', P .. 'qb')
return removed
