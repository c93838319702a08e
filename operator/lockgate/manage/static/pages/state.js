// What an endpoint's badge says, from its record (phase, conditions) and its job API's
// /health: a phase reads green Ready only while its workers are not failing. Shared by the
// Endpoints list, the Overview and the test runner.

const PHASE_TONE = {Ready: "ok", Initializing: "warn", Pending: "warn", Degraded: "bad", Failed: "bad",
  CrashLoop: "bad"};
// WorkersHealthy reasons (dev.workers, kube.podstates) and the badge each one shows;
// another reason shows "Unhealthy".
const WORKER_BADGES = {
  CrashLoop: ["Crash loop", "bad"],
  ImagePullError: ["Image pull error", "bad"],
  ContainerConfigError: ["Config error", "bad"],
  NoGpuCapacity: ["No GPU capacity", "warn"],
  NoCpuCapacity: ["No CPU capacity", "warn"],
  ModelFetchFailed: ["Model download failed", "bad"],
};

/** Whether a condition says something is wrong: False for most, True for `CrashLoop`
 * (lockgate stopped starting workers: docs/crash-loops.md). */
export function conditionWrong(c) {
  return c.type === "CrashLoop" ? c.status === "True" : c.status === "False";
}

/** The endpoint's `CrashLoop` condition while it holds (no worker starts), else null. */
export function crashLoop(record) {
  return (record?.status?.conditions || [])
    .find((c) => c.type === "CrashLoop" && c.status === "True") || null;
}

/** The endpoint's `WorkersHealthy` condition when it is False, else null. */
export function workersFailing(record) {
  return (record?.status?.conditions || [])
    .find((c) => c.type === "WorkersHealthy" && c.status === "False") || null;
}

/** The condition saying the endpoint's models are being downloaded (its workers wait):
 * `ModelsCached` Downloading (dev mode) or `WorkersHealthy` DownloadingModels (a cluster). */
export function modelsDownloading(record) {
  return (record?.status?.conditions || []).find((c) =>
    (c.type === "ModelsCached" && c.status === "False" && c.reason === "Downloading")
    || (c.type === "WorkersHealthy" && c.status === "True" && c.reason === "DownloadingModels"))
    || null;
}

// The Endpoints list's filter choice for endpoints whose workers fail, whatever their phase.
export const WORKERS_FAILING = "failing";

/**
 * {label, tone, why, trouble} of an endpoint's badge: the cause ("Crash loop", "Image pull
 * error", "No GPU capacity", "Model download failed", else "Unhealthy") when its
 * WorkersHealthy condition is False, red "Unhealthy" when /health counts unhealthy workers
 * (`trouble` true for both), "Downloading models" while its workers wait for them and none
 * serves, else its phase.
 */
export function endpointState(record, health) {
  const phase = record?.status?.phase || "Pending";
  if (phase === "Failed") return {label: phase, tone: "bad", why: ""};
  const loop = crashLoop(record);
  if (phase === "CrashLoop" || loop) {
    return {label: "Crash loop", tone: "bad", why: loop?.message || "", trouble: true, stopped: true};
  }
  const failing = workersFailing(record);
  const unhealthy = health?.workers?.unhealthy || 0;
  if (failing) {
    const [label, tone] = WORKER_BADGES[failing.reason] || ["Unhealthy", "bad"];
    return {label, tone, why: failing.message || failing.reason || "", trouble: true};
  }
  if (unhealthy > 0) {
    const why = `${unhealthy} worker${unhealthy === 1 ? "" : "s"} unhealthy`;
    return {label: "Unhealthy", tone: "bad", why, trouble: true};
  }
  const serving = (health?.workers?.idle || 0) + (health?.workers?.running || 0);
  const models = serving ? null : modelsDownloading(record);
  if (models) return {label: "Downloading models", tone: "warn", why: models.message || ""};
  return {label: phase, tone: PHASE_TONE[phase] || "muted", why: ""};
}

/**
 * Whether an endpoint whose badge is `state` passes the list's phase filter: a phase keeps
 * the endpoints whose badge shows that phase (a crash-looping Ready endpoint is not Ready),
 * WORKERS_FAILING those whose badge names a worker problem, "" every endpoint.
 */
export function matchesPhaseFilter(state, filter) {
  if (!filter) return true;
  if (filter === WORKERS_FAILING) return Boolean(state.trouble);
  return !state.trouble && state.label === filter;
}

/** What the test runner says instead of "a cold start" while workers fail, or null when
 * they do not: "Workers are crashing" (a crash loop, or unhealthy workers in /health) or
 * "Workers cannot start" (any other WorkersHealthy cause: image pull, capacity, config). */
export function workersTrouble(record, health) {
  const failing = workersFailing(record);
  if (failing?.reason === "CrashLoop" || (!failing && (health?.workers?.unhealthy || 0) > 0)) {
    return "Workers are crashing";
  }
  return failing ? "Workers cannot start" : null;
}
