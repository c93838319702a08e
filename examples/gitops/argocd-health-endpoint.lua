-- Argo CD health check of a lockgate Endpoint (lockgate.dev/Endpoint): status.phase and
-- status.conditions, as the operator writes them, to Healthy, Progressing or Degraded.
-- Installed through argocd-cm (argocd-cm.yaml beside this file holds the same text).
local hs = {status = "Progressing", message = "Waiting for the lockgate operator"}

local function condition(status, type_)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function say(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
if status == nil or status.phase == nil then
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.message = "The operator has not handled the latest spec yet"
  return hs
end

local ready = condition(status, "Ready")
local metrics = condition(status, "MetricsAvailable")
if status.phase == "Degraded" or (status.phase == "Ready" and metrics ~= nil and metrics.status == "False") then
  -- Degraded: it would be Ready, but the scaler cannot read the gateway's metrics
  hs.status = "Degraded"
  hs.message = "Scaler cannot read metrics: " .. say(metrics, (metrics and metrics.reason) or "")
elseif status.phase == "Ready" then
  hs.status = "Healthy"
  hs.message = say(ready, "Ready")
elseif status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = say(ready, "Failed: the Endpoint or its Template must change")
elseif status.phase == "CrashLoop" then
  -- workers failed to start crashLoopThreshold times in a row: none is started
  hs.status = "Degraded"
  hs.message = say(condition(status, "CrashLoop"), "CrashLoop: workers crash at start")
elseif status.phase == "Pending" or status.phase == "Initializing" then
  hs.status = "Progressing"
  hs.message = status.phase .. ": " .. say(ready, "waiting")
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(status.phase)
end
return hs
