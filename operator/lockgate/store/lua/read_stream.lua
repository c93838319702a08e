-- /stream: the job's status and the chunks produced since the previous read, and the
-- number of the first of them (counted for live jobs only: `ch`, chunks read so far).
-- ARGV: id, now. Returns false for an unknown or expired job, else {status, {chunk, ...},
-- first}.
local id, now = ARGV[1], tonumber(ARGV[2])
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'cr', 'tl', 'lv', 'ch')
if not f[1] or tonumber(f[2]) + tonumber(f[3]) <= now then return false end
local st = f[1]
local first = tonumber(f[5]) or 0
local sk = P .. 's:' .. id
local chunks = redis.call('LRANGE', sk, 0, -1)
if #chunks > 0 then
  redis.call('DEL', sk)
  redis.call('HDEL', jk, 'sb')
  if f[4] == '1' then redis.call('HSET', jk, 'ch', first + #chunks) end
end
return {st, chunks, first}
