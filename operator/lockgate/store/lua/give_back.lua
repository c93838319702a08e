-- A worker gives back jobs it took ahead of a free slot and never started (lockgate's
-- runtime, worker/runtime.py: a job that waited too long behind another, or one in hand
-- when it was told to stop): each held by this worker and still IN_PROGRESS goes back to
-- the front of its queue as it was, without using an attempt and not counted as retried,
-- its attempt ended GIVEN_BACK (`requeue`'s clean case). Others are left alone.
-- Arguments: store/args_workers.py GiveBack (`ids`: the jobs given back).
-- Returns how many went back.
local given = 0
for i = ids_from, #ARGV do
  local id = ARGV[i]
  local j = held_job(id)
  if j.status == 'IN_PROGRESS' and j.worker == worker then
    given = given + requeue(ep, id, j, now, 0, 0, 0, '', true)
  end
end
return given
