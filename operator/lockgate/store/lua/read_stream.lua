-- /stream: the job's status and the chunks produced since the previous read, and the
-- number of the first of them (counted for live jobs only: `ch`, chunks read so far).
-- Arguments: store/args_jobs.py ReadStream. Returns false for an unknown or expired job,
-- else {status, {chunk, ...}, first}.
local jk = jkey(id)
local st, created, ttl, live, read = unpack(redis.call('HMGET', jk, F_STATUS, F_CREATED, F_TTL,
  F_LIVE, F_CHUNKS_READ))
if not st or tonumber(created) + tonumber(ttl) <= now then return false end
local first = tonumber(read) or 0
local sk = P .. 's:' .. id
local chunks = redis.call('LRANGE', sk, 0, -1)
if #chunks > 0 then
  redis.call('DEL', sk)
  redis.call('HDEL', jk, F_STREAM_BYTES)
  if live == '1' then redis.call('HSET', jk, F_CHUNKS_READ, first + #chunks) end
end
return {st, chunks, first}
