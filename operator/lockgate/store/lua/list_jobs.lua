-- GET /requests: one page of the endpoint's jobs, newest first, merged from the listing
-- indexes of the states asked for (see common.lua). Read-only.
-- Arguments: store/args_jobs.py ListJobs (hi: the highest score, Redis range syntax: '+inf'
-- or '(<score>'; lo: the lowest, inclusive, or '-inf').
-- Returns {next, {id, <LISTED_FIELDS>...}, ...}: the live jobs among the next
-- `limit` index entries (a record that died and is not yet swept out of the index is
-- skipped, so a page can be short), and `next` = the score of the last entry looked at
-- when more entries follow (the next page starts below it), else ''.
local found = {}
for i = states_from, #ARGV do
  local got = redis.call('ZREVRANGEBYSCORE', P .. 'ix:' .. ARGV[i], hi, lo, 'WITHSCORES',
    'LIMIT', 0, limit + 1)
  for j = 1, #got, 2 do found[#found + 1] = {got[j], got[j + 1], tonumber(got[j + 1])} end
end
table.sort(found, function(a, b) return a[3] > b[3] or (a[3] == b[3] and a[1] > b[1]) end)
local out = {''}
if #found > limit then out[1] = found[limit][2] end
for k = 1, math.min(limit, #found) do
  local id = found[k][1]
  -- LISTED_FIELDS starts with status, createdAt, ttl (store/records.py)
  local f = redis.call('HMGET', jkey(id), unpack(LISTED_FIELDS))
  local st, created, ttl = f[1], f[2], f[3]
  if st and tonumber(created) + tonumber(ttl) > now then
    table.insert(f, 1, id)
    out[#out + 1] = f
  end
end
return out
