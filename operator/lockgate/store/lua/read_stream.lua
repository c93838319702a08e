-- /stream: the job's status and the chunks produced since the previous read.
-- ARGV: id. Returns false for an unknown job, else {status, {chunk, ...}}.
local id = ARGV[1]
local st = redis.call('HGET', jkey(id), 'st')
if not st then return false end
local sk = P .. 's:' .. id
local chunks = redis.call('LRANGE', sk, 0, -1)
if #chunks > 0 then redis.call('DEL', sk) end
return {st, chunks}
