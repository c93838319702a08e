-- A worker appends stream chunks to a job it holds. ARGV: id, worker, chunk...
local id, worker = ARGV[1], ARGV[2]
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'wk')
if f[1] ~= 'IN_PROGRESS' or f[2] ~= worker then return 0 end
local sk = P .. 's:' .. id
redis.call('RPUSH', sk, unpack(ARGV, 3))
redis.call('PEXPIRE', sk, redis.call('PTTL', jk))
return 1
