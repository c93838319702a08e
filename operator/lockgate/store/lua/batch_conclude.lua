-- The batch is done: `status`, its webhook (if it has one) due at `now`, every key of it
-- kept `retention` ms. The first caller wins.
-- Arguments: store/args_batches.py ConcludeBatch.
-- Returns 1 when this call ended it, else 0.
local rec = bkey(batch, BP_RECORD)
if redis.call('HSETNX', rec, B_DONE, now) == 0 then return 0 end
redis.call('HSET', rec, B_STATUS, status, B_IN_PROGRESS, 0)
redis.call('SREM', P .. BATCH_KEY .. BATCH_ACTIVE, batch)
if redis.call('HEXISTS', rec, B_WEBHOOK) == 1 then
  redis.call('HSET', rec, B_WH_STATE, 'pending', B_WH_DUE, now, B_WH_ATTEMPTS, 0)
end
for _, part in ipairs(BATCH_PARTS) do redis.call('PEXPIRE', bkey(batch, part), retention) end
return 1
