-- Claim due webhook deliveries for this replica: each due job id is leased (its next
-- attempt pushed `lease` ms ahead, so a crashed replica's claim comes back) and its
-- attempt counted. Arguments: store/args_jobs.py ClaimWebhooks.
-- Returns {{id, url, attempt}, ...}; a job whose record is gone is dropped.
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'wh', '-inf', now, 'LIMIT', 0, limit)) do
  local url = redis.call('HGET', jkey(id), F_WEBHOOK)
  if url then
    redis.call('ZADD', P .. 'wh', now + lease, id)
    out[#out + 1] = {id, url, redis.call('HINCRBY', P .. 'wha', id, 1)}
  else
    redis.call('ZREM', P .. 'wh', id)
    redis.call('HDEL', P .. 'wha', id)
  end
end
return out
