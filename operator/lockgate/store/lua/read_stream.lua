-- /stream: the job's status and the chunks produced since the previous read.
-- ARGV: id, now. Returns false for an unknown or expired job, else {status, {chunk, ...}}.
local id, now = ARGV[1], tonumber(ARGV[2])
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'cr', 'tl')
if not f[1] or tonumber(f[2]) + tonumber(f[3]) <= now then return false end
local st = f[1]
local sk = P .. 's:' .. id
local chunks = redis.call('LRANGE', sk, 0, -1)
if #chunks > 0 then
  redis.call('DEL', sk)
  redis.call('HDEL', jk, 'sb')
end
return {st, chunks}
