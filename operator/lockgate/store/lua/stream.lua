-- A worker appends stream chunks to a job it holds, all or none, unless the stream data
-- not yet read by /stream would exceed the cap. The record's `sb` field counts those bytes.
-- A job read live (`lv`, an OpenAI stream) numbers its chunks (`cs`: how many so far) and
-- publishes `c:<ep>:<id>:<number of the first>`, followed by the chunks, one per line, when
-- they are small: its reader then needs no read of its own (JSON has no raw newline).
-- ARGV: id, worker, cap (bytes), ep, chunk... Returns 1 when appended, 0 when the worker no
-- longer holds the job, -1 when the chunks would take the unread stream past the cap.
local LIVE_CARRY = 65536  -- bytes of chunks an event carries at most
local id, worker, cap, ep = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'wk', 'sb', 'lv')
if f[1] ~= 'IN_PROGRESS' or f[2] ~= worker then return 0 end
local size = 0
for i = 5, #ARGV do size = size + #ARGV[i] end
local unread = (tonumber(f[3]) or 0) + size
if unread > cap then return -1 end
redis.call('HSET', jk, 'sb', unread)
local sk = P .. 's:' .. id
redis.call('RPUSH', sk, unpack(ARGV, 5))
redis.call('PEXPIRE', sk, redis.call('PTTL', jk))
if f[4] == '1' then
  local n = #ARGV - 4
  local first = redis.call('HINCRBY', jk, 'cs', n) - n
  local event = 'c:' .. ep .. ':' .. id .. ':' .. first
  if size <= LIVE_CARRY then event = event .. '\n' .. table.concat(ARGV, '\n', 5) end
  redis.call('PUBLISH', EVENTS, event)
end
return 1
