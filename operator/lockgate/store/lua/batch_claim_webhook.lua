-- Claim the batch's webhook attempt for `lease` ms when it is due and no other replica
-- holds it.
-- Arguments: store/args_batches.py ClaimBatchWebhook.
-- Returns the attempt's number (from 1), 0 when not claimed.
local rec = bkey(batch, BP_RECORD)
local state, due, held = unpack(redis.call('HMGET', rec, B_WH_STATE, B_WH_DUE, B_WH_LEASE))
if state ~= 'pending' then return 0 end
if tonumber(due or 0) > now or tonumber(held or 0) > now then return 0 end
redis.call('HSET', rec, B_WH_LEASE, now + lease)
return redis.call('HINCRBY', rec, B_WH_ATTEMPTS, 1)
