-- After a delivery attempt: done (delivered or out of attempts) removes it from the
-- outbox; otherwise the next attempt is due at `retry_at`. ARGV: id, done (1/0), retry_at.
local id = ARGV[1]
if ARGV[2] == '1' then
  redis.call('ZREM', P .. 'wh', id)
  redis.call('HDEL', P .. 'wha', id)
else
  redis.call('ZADD', P .. 'wh', tonumber(ARGV[3]), id)
end
return 1
