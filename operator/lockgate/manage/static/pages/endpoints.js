// The Endpoints page: every endpoint with its phase, job API URL, workers, queue, jobs/min
// and failures; an endpoint with a False condition stands out with its message. Refreshes
// every 5 s. Sources: GET /v1/endpoints (records with status), each endpoint's job API
// /health (worker states), and GET /v1/endpoints/{id}/metrics (jobs/min, failures) where
// that route answers.
import {api, jobApi} from "../api.js";
import {copyButton, h, replace} from "../dom.js";

const REFRESH_MS = 5000;
const WINDOW_S = 60; // jobs/min counts the last minute of the history

const PHASES = {Ready: "ok", Initializing: "warn", Pending: "warn", Degraded: "bad", Failed: "bad"};

/** Jobs/min and failures (last hour) from contract C's points; null without history. */
export function throughput(metrics) {
  const points = metrics?.points;
  if (!Array.isArray(points) || !points.length) return null;
  const last = points[points.length - 1].t;
  const recent = points.filter((p) => p.t > last - WINDOW_S);
  const sum = (list, key) => list.reduce((n, p) => n + (p[key] || 0), 0);
  return {perMin: sum(recent, "completed") + sum(recent, "failed"), failed: sum(points, "failed")};
}

/** The conditions that say something is wrong. */
export function failing(record) {
  // An endpoint whose workers are still starting is not failing: its Ready condition is
  // False only until the first worker is ready (phase Initializing).
  const starting = record.status?.phase === "Initializing";
  return (record.status?.conditions || [])
    .filter((c) => c.status === "False" && !(starting && c.type === "Ready"));
}

async function optional(promise) {
  try {
    return await promise;
  } catch (err) {
    if (err.name === "AbortError") throw err;
    return null;
  }
}

export async function render(view, ctx) {
  const list = h("div", {"aria-live": "off"});
  replace(view,
    h("div", {class: "row"}, h("h1", {class: "grow"}, "Endpoints"),
      h("a", {class: "button primary", href: "#/new"}, "New endpoint")),
    list);
  const noMetrics = new Set(); // endpoints whose history route did not answer: not asked again
  ctx.every(REFRESH_MS, async () => {
    const records = await api("/v1/endpoints", {signal: ctx.signal});
    const extra = await Promise.all(records.map(async (r) => {
      const id = encodeURIComponent(r.id);
      const health = optional(api(`${jobApi(r)}/health`, {signal: ctx.signal, redirect: false}));
      const metrics = noMetrics.has(r.id) ? null
        : optional(api(`/v1/endpoints/${id}/metrics`, {signal: ctx.signal, redirect: false}));
      const [healthAnswer, m] = await Promise.all([health, metrics]);
      if (m === null) noMetrics.add(r.id);
      return {health: healthAnswer, metrics: m};
    }));
    keepFocus(list, () => replace(list, records.length
      ? table(records, extra)
      : h("div", {class: "card"}, h("p", {}, "No endpoint yet. "), h("a", {href: "#/new"}, "Create one"))));
  });
}

/** Rebuild without losing the keyboard focus (elements carry a data-key). */
function keepFocus(root, rebuild) {
  const key = root.contains(document.activeElement) ? document.activeElement.dataset.key : null;
  rebuild();
  if (key) root.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
}

function table(records, extra) {
  return h("div", {class: "table-wrap"}, h("table", {class: "endpoints"},
    h("caption", {class: "sr-only"}, "Endpoints, refreshed every 5 seconds"),
    h("thead", {}, h("tr", {}, ["Endpoint", "Phase", "Job API URL", "Workers", "Queue", "Jobs/min", "Failures"]
      .map((c) => h("th", {scope: "col"}, c)))),
    records.map((r, i) => rows(r, extra[i]))));
}

function rows(record, {health, metrics}) {
  const phase = record.status?.phase || "Pending";
  const problems = failing(record);
  const url = record.status?.jobApiUrl || record.jobApiUrl;
  const w = record.status?.workers || {};
  const workers = health?.workers || {idle: w.idle, running: w.running};
  const stats = throughput(metrics);
  const queued = health?.jobs ? health.jobs.inQueue : record.status?.jobs?.inQueue;
  const link = `#/endpoints/${encodeURIComponent(record.id)}`;
  const trouble = ["initializing", "throttled", "unhealthy"].filter((k) => workers[k] > 0)
    .map((k) => h("span", {class: `badge ${k === "initializing" ? "muted" : "bad"}`}, `${workers[k]} ${k}`));
  const main = h("tr", {class: problems.length ? "failing" : null, dataset: {endpoint: record.id}},
    cell("Endpoint", h("a", {href: link, class: "ep-id", dataset: {key: `open-${record.id}`}}, record.id),
      record.name && record.name !== record.id ? h("div", {class: "hint"}, record.name) : null),
    cell("Phase", h("span", {class: `badge ${PHASES[phase] || "muted"}`}, phase)),
    cell("Job API URL", url
      ? h("div", {class: "url-cell"}, h("code", {class: "url"}, url), copyCell(url, record.id))
      : h("span", {class: "hint"}, "not yet")),
    cell("Workers",
      h("span", {}, `${workers.running ?? 0} running · ${workers.idle ?? 0} idle`),
      h("div", {class: "hint"}, `min ${record.workersMin} · max ${record.workersMax}`), trouble),
    cell("Queue", `${queued ?? "—"}`,
      health?.jobs?.inProgress ? h("div", {class: "hint"}, `${health.jobs.inProgress} in progress`) : null),
    cell("Jobs/min", stats ? String(stats.perMin) : "—"),
    cell("Failures", stats
      ? h("span", {class: stats.failed ? "bad-text" : null}, `${stats.failed} in 1 h`)
      : (health?.jobs?.failed !== undefined ? String(health.jobs.failed) : "—")));
  if (!problems.length) return h("tbody", {}, main);
  return h("tbody", {class: "failing"}, main, h("tr", {class: "problem"},
    h("td", {colspan: 7}, problems.map((c) => h("div", {class: "error", role: "note"},
      h("strong", {}, `${c.reason || c.type}: `), c.message || `${c.type} is False`)))));
}

/** A cell whose content is one block (phone width shows the label beside it). */
function cell(label, ...children) {
  return h("td", {"data-label": label}, h("div", {class: "cell"}, ...children));
}

function copyCell(url, id) {
  const button = copyButton(url, "Copy");
  button.dataset.key = `copy-${id}`;
  return button;
}
