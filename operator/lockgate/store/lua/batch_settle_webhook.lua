-- After a webhook attempt: its delivery's `state`, due again at `due`; the lease is let go.
-- Arguments: store/args_batches.py SettleBatchWebhook.
-- Returns 1, or 0 when the batch is gone.
local rec = bkey(batch, BP_RECORD)
if redis.call('EXISTS', rec) == 0 then return 0 end
redis.call('HSET', rec, B_WH_STATE, state, B_WH_DUE, due)
redis.call('HDEL', rec, B_WH_LEASE)
return 1
