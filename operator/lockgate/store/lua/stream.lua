-- A worker appends stream chunks to a job it holds, all or none, unless the stream data
-- not yet read by /stream would exceed the cap. The record's `sb` field counts those bytes.
-- A job read live (`lv`, an OpenAI stream) numbers its chunks (`cs`: how many so far) and
-- publishes `c:<ep>:<id>:<number of the first>`, followed by the chunks, one per line, when
-- they are small: its reader then needs no read of its own (JSON has no raw newline).
-- Arguments: store/args_jobs.py Stream. Returns 1 when appended, 0 when the worker no
-- longer holds the job, -1 when the chunks would take the unread stream past the cap.
local LIVE_CARRY = 65536  -- bytes of chunks an event carries at most
local jk = jkey(id)
local st, wk, unread_before, live = unpack(redis.call('HMGET', jk, F_STATUS, F_WORKER,
  F_STREAM_BYTES, F_LIVE))
if st ~= 'IN_PROGRESS' or wk ~= worker then return 0 end
local size = 0
for i = chunks_from, #ARGV do size = size + #ARGV[i] end
local unread = (tonumber(unread_before) or 0) + size
if unread > cap then return -1 end
redis.call('HSET', jk, F_STREAM_BYTES, unread)
local sk = P .. 's:' .. id
redis.call('RPUSH', sk, unpack(ARGV, chunks_from))
redis.call('PEXPIRE', sk, redis.call('PTTL', jk))
if live == '1' then
  local n = #ARGV - chunks_from + 1
  local first = redis.call('HINCRBY', jk, F_CHUNKS_SENT, n) - n
  local event = 'c:' .. ep .. ':' .. id .. ':' .. first
  if size <= LIVE_CARRY then event = event .. '\n' .. table.concat(ARGV, '\n', chunks_from) end
  redis.call('PUBLISH', EVENTS, event)
end
return 1
