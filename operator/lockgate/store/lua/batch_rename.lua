-- PUT …/batch/{id}: the display name.
-- Arguments: store/args_batches.py RenameBatch.
-- Returns 1 when set, 0 when there is no such batch.
local rec = bkey(batch, BP_RECORD)
if redis.call('EXISTS', rec) == 0 then return 0 end
redis.call('HSET', rec, B_NAME, name)
return 1
