-- After a delivery attempt: done (delivered or out of attempts) removes it from the
-- outbox; otherwise the next attempt is due at `retry_at`; `refund` (1/0): the claim made
-- no attempt, its host was busy: give the attempt back. Arguments: store/args_jobs.py
-- SettleWebhook.
if done == '1' then
  redis.call('ZREM', P .. 'wh', id)
  redis.call('HDEL', P .. 'wha', id)
else
  redis.call('ZADD', P .. 'wh', retry_at, id)
  if refund == '1' then
    redis.call('HINCRBY', P .. 'wha', id, -1)
  end
end
return 1
