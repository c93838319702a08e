-- GET /requests: one page of the endpoint's jobs, newest first, merged from the listing
-- indexes of the states asked for (see common.lua). Read-only.
-- ARGV: now (ms), hi (highest score, Redis range syntax: '+inf' or '(<score>'), lo (lowest
-- score, inclusive, or '-inf'), limit, states...
-- Returns {next, {id, st, cr, tl, qd, sa, fi, wk, err}, ...}: the live jobs among the next
-- `limit` index entries (a record that died and is not yet swept out of the index is
-- skipped, so a page can be short), and `next` = the score of the last entry looked at
-- when more entries follow (the next page starts below it), else ''.
local now, hi, lo, limit = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local found = {}
for i = 5, #ARGV do
  local got = redis.call('ZREVRANGEBYSCORE', P .. 'ix:' .. ARGV[i], hi, lo, 'WITHSCORES',
    'LIMIT', 0, limit + 1)
  for j = 1, #got, 2 do found[#found + 1] = {got[j], got[j + 1], tonumber(got[j + 1])} end
end
table.sort(found, function(a, b) return a[3] > b[3] or (a[3] == b[3] and a[1] > b[1]) end)
local out = {''}
if #found > limit then out[1] = found[limit][2] end
for k = 1, math.min(limit, #found) do
  local id = found[k][1]
  local f = redis.call('HMGET', jkey(id), 'st', 'cr', 'tl', 'qd', 'sa', 'fi', 'wk', 'err')
  if f[1] and tonumber(f[2]) + tonumber(f[3]) > now then
    out[#out + 1] = {id, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]}
  end
end
return out
