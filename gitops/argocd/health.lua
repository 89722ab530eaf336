-- Argo CD health of a PtahSchema or a PtahMigration (operator.ptah.run),
-- for argocd-cm's resource.customizations.health.operator.ptah.run_PtahSchema
-- and ..._PtahMigration (the same script under both keys).
--
--   InSync                    Healthy
--   AwaitingApproval          Suspended   (a person approves the plan)
--   Planning under Never      Suspended   (a migration's plan is published, never run)
--   Suspended (spec.suspend)  Suspended
--   Blocked, Failed           Degraded    (the message names the reason)
--   anything else, no status  Progressing (ReadyToApply is an automatic step)
--
-- The message is the Ready condition's message, or its reason when the
-- message is empty, after the phase. Tested by conformance/tests/gitops_health.rs
-- with Argo CD's own Lua engine over status taken from the harness.
local hs = {}

local function progressing(message)
  hs.status = "Progressing"
  hs.message = message
  return hs
end

if obj.status == nil or obj.status.phase == nil then
  return progressing("waiting for the operator's first read")
end
local phase = obj.status.phase

local ready = nil
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" then
      ready = c
    end
  end
end

-- A status written for an older spec says nothing about this one. (Argo CD
-- opens no string library for health scripts: concatenation only.)
local generation = obj.metadata.generation
if generation ~= nil then
  local status_seen = obj.status.observedGeneration
  local ready_seen = ready ~= nil and ready.observedGeneration or nil
  if (status_seen == nil and ready_seen == nil)
      or (status_seen ~= nil and status_seen < generation)
      or (ready_seen ~= nil and ready_seen < generation) then
    return progressing("waiting for the operator to observe generation " .. tostring(generation))
  end
end

local reason = ""
local message = ""
if ready ~= nil then
  reason = ready.reason or ""
  message = ready.message or ""
end
local detail = message
if detail == "" then
  detail = reason
end
local said = phase
if detail ~= "" then
  said = phase .. ": " .. detail
end

if phase == "InSync" then
  hs.status = "Healthy"
  hs.message = said
elseif phase == "AwaitingApproval" or phase == "Suspended"
    or (phase == "Planning" and reason == "ApplyDisabled") then
  hs.status = "Suspended"
  hs.message = said
elseif phase == "Blocked" or phase == "Failed" then
  hs.status = "Degraded"
  hs.message = phase .. ": " .. (reason ~= "" and reason or "unknown reason")
  if message ~= "" then
    hs.message = hs.message .. ": " .. message
  end
else
  return progressing(said)
end
return hs
