-- POST …/batch/{id}/finalize: DRAFT -> FINALIZED, unless the endpoint's finalized batches
-- would then hold more than `most_queued` requests not yet ended (each running batch
-- counts its requests not yet queued and those queued and not final).
-- Arguments: store/args_batches.py FinalizeBatch.
-- Returns {'ok', <its total>}, {'gone', ''}, {'state', <status>} or {'queued', <limit>}.
local rec = bkey(batch, BP_RECORD)
local st, total = unpack(redis.call('HMGET', rec, B_STATUS, B_TOTAL))
if not st then return {'gone', ''} end
if st ~= BS_DRAFT then return {'state', st} end
local queued = tonumber(total)
for _, other in ipairs(redis.call('SMEMBERS', P .. BATCH_KEY .. BATCH_ACTIVE)) do
  if other ~= batch and redis.call('HGET', bkey(other, BP_RECORD), B_STATUS) == BS_FINALIZED then
    queued = queued + redis.call('HLEN', bkey(other, BP_INPUTS))
      + redis.call('SCARD', bkey(other, BP_OPEN))
  end
end
if queued > most_queued then return {'queued', tostring(most_queued)} end
redis.call('HSET', rec, B_STATUS, BS_FINALIZED, B_FINALIZED, now)
return {'ok', tostring(total)}
