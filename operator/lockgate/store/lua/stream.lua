-- A worker appends stream chunks to a job it holds, all or none, unless the stream data
-- not yet read by /stream would exceed the cap. The record's `sb` field counts those bytes.
-- ARGV: id, worker, cap (bytes), chunk... Returns 1 when appended, 0 when the worker no
-- longer holds the job, -1 when the chunks would take the unread stream past the cap.
local id, worker, cap = ARGV[1], ARGV[2], tonumber(ARGV[3])
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'wk', 'sb')
if f[1] ~= 'IN_PROGRESS' or f[2] ~= worker then return 0 end
local unread = tonumber(f[3]) or 0
for i = 4, #ARGV do unread = unread + #ARGV[i] end
if unread > cap then return -1 end
redis.call('HSET', jk, 'sb', unread)
local sk = P .. 's:' .. id
redis.call('RPUSH', sk, unpack(ARGV, 4))
redis.call('PEXPIRE', sk, redis.call('PTTL', jk))
return 1
