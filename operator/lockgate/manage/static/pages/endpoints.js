// The Endpoints page: endpoints with their phase, job API URL, workers, queue, jobs/min
// and failures (a load-balancing endpoint: its LB URL, and requests held and in flight
// instead of a queue and jobs); an endpoint with a False condition stands out with its message. Refreshes
// every 5 s. Sources: GET /v1/endpoints (records with status, a page at a time, filtered
// by name and phase), each shown endpoint's job API /health (worker states), and
// GET /v1/endpoints/{id}/metrics (jobs/min, failures) where that route answers. The phase
// filter goes by the badge (state.js): the API's phase filter, then the badge's state, so
// "Ready" leaves out crash-looping or unhealthy endpoints, and "Workers failing" shows them.
import {api, jobApi, listPage} from "../api.js";
import {copyButton, h, replace} from "../dom.js";
import {isLb, lbUrl} from "./lb.js";
import {WORKERS_FAILING, conditionWrong, endpointState, matchesPhaseFilter} from "./state.js";

const REFRESH_MS = 5000;
const WINDOW_S = 60; // jobs/min counts the last minute of the history
const PAGE = 50; // endpoints shown at first, and added by "Show more"
const MAX_LIMIT = 1000; // the API's largest page
const MAX_READS = 10; // pages one refresh follows (a filtered page may come back short)
const TYPING_MS = 300; // the name filter applies once typing pauses this long

const PHASES = {Ready: "ok", Initializing: "warn", Pending: "warn", Degraded: "bad", Failed: "bad",
  CrashLoop: "bad"};

/** Jobs/min and failures (FAILED or TIMED_OUT, last hour) from contract C's points; null
 * without history. */
export function throughput(metrics) {
  const points = metrics?.points;
  if (!Array.isArray(points) || !points.length) return null;
  const last = points[points.length - 1].t;
  const recent = points.filter((p) => p.t > last - WINDOW_S);
  const sum = (list, ...keys) => list.reduce((n, p) => n + keys.reduce((m, k) => m + (p[k] || 0), 0), 0);
  return {perMin: sum(recent, "completed", "failed", "timedOut"), failed: sum(points, "failed", "timedOut")};
}

/** The conditions that say something is wrong. */
export function failing(record) {
  // An endpoint whose workers are still starting is not failing: its Ready condition is
  // False only until the first worker is ready (phase Initializing).
  const starting = record.status?.phase === "Initializing";
  return (record.status?.conditions || [])
    .filter((c) => conditionWrong(c) && !(starting && c.type === "Ready"));
}

async function optional(promise) {
  try {
    return await promise;
  } catch (err) {
    if (err.name === "AbortError") throw err;
    return null;
  }
}

/**
 * The first `want` endpoints matching `filters` ({name, phase}), following continue
 * tokens: {records, more} where `more` says that endpoints follow them.
 */
export async function endpointsUpTo(want, filters, signal) {
  const records = [];
  let next = null;
  for (let reads = 0; reads < MAX_READS && records.length < want; reads++) {
    const query = new URLSearchParams({limit: String(Math.min(want - records.length, MAX_LIMIT))});
    for (const [key, value] of Object.entries(filters)) if (value) query.set(key, value);
    if (next) query.set("continue", next);
    const page = await listPage(`/v1/endpoints?${query}`, {signal});
    records.push(...page.items);
    next = page.next;
    if (!next) break;
  }
  return {records, more: Boolean(next)};
}

export async function render(view, ctx) {
  const asked = ctx.query.get("phase");
  const known = PHASES[asked] || asked === WORKERS_FAILING;
  const filters = {name: ctx.query.get("name") || "", phase: known ? asked : ""};
  let want = PAGE;
  let latest = 0; // only the newest refresh draws: a slower older one must not overwrite it
  const list = h("div", {"aria-live": "off"});
  const footer = h("div", {class: "row list-footer"});
  const noMetrics = new Set(); // endpoints whose history route did not answer: not asked again

  async function refresh() {
    const turn = ++latest;
    const asked = {name: filters.name, phase: PHASES[filters.phase] ? filters.phase : ""};
    const {records: found, more} = await endpointsUpTo(want, asked, ctx.signal);
    const details = await Promise.all(found.map(async (r) => {
      const id = encodeURIComponent(r.id);
      const health = optional(api(`${jobApi(r)}/health`, {signal: ctx.signal, redirect: false}));
      const metrics = noMetrics.has(r.id) ? null
        : optional(api(`/v1/endpoints/${id}/metrics`, {signal: ctx.signal, redirect: false}));
      const [healthAnswer, m] = await Promise.all([health, metrics]);
      if (m === null) noMetrics.add(r.id);
      return {health: healthAnswer, metrics: m, state: endpointState(r, healthAnswer)};
    }));
    if (turn !== latest) return;
    const shownAt = found.map((_, i) => i).filter((i) => matchesPhaseFilter(details[i].state, filters.phase));
    const records = shownAt.map((i) => found[i]);
    const extra = shownAt.map((i) => details[i]);
    keepFocus(view, () => {
      replace(list, records.length ? table(records, extra) : empty(filters));
      replace(footer, records.length ? h("span", {class: "hint grow"}, shown(records.length, more)) : null,
        more ? h("button", {type: "button", dataset: {key: "more"}, onclick: () => {
          want += PAGE;
          refresh().catch(ignoreAbort);
        }}, `Show ${PAGE} more`) : null);
    });
  }

  function filtered() {
    want = PAGE;
    const search = new URLSearchParams(Object.entries(filters).filter(([, v]) => v)).toString();
    history.replaceState(null, "", `#/endpoints${search ? `?${search}` : ""}`); // no re-render
    refresh().catch(ignoreAbort);
  }

  let typing;
  const name = h("input", {
    id: "filter-name", type: "search", value: filters.name, autocomplete: "off", maxlength: 191,
    placeholder: "part of a name or id", oninput: () => {
      clearTimeout(typing);
      typing = setTimeout(() => { filters.name = name.value.trim(); filtered(); }, TYPING_MS);
    },
  });
  const phase = h("select", {id: "filter-phase", onchange: () => { filters.phase = phase.value; filtered(); }},
    h("option", {value: ""}, "Any phase"),
    Object.keys(PHASES).map((p) => h("option", {value: p, selected: p === filters.phase}, p)),
    h("option", {value: WORKERS_FAILING, selected: filters.phase === WORKERS_FAILING},
      "Workers failing (crash loop, unhealthy, …)"));
  replace(view,
    h("div", {class: "row"}, h("h1", {class: "grow"}, "Endpoints"),
      h("a", {class: "button primary", href: "#/new"}, "New endpoint")),
    h("form", {class: "row filters", role: "search", "aria-label": "Filter endpoints",
      onsubmit: (event) => event.preventDefault()},
    h("div", {class: "grow"}, h("label", {for: "filter-name"}, "Name or id"), name),
    h("div", {}, h("label", {for: "filter-phase"}, "Phase"), phase)),
    list, footer);
  ctx.every(REFRESH_MS, refresh);
  return () => clearTimeout(typing);
}

function ignoreAbort(err) {
  if (err.name !== "AbortError") console.warn(err);
}

function shown(count, more) {
  return `${count} endpoint${count === 1 ? "" : "s"}${more ? ", more follow" : ""}`;
}

function empty(filters) {
  if (filters.name || filters.phase) return h("div", {class: "card"}, h("p", {}, "No endpoint matches these filters."));
  return h("div", {class: "card"}, h("p", {}, "No endpoint yet. "), h("a", {href: "#/new"}, "Create one"));
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
    h("thead", {}, h("tr", {}, ["Endpoint", "Phase", "URL", "Workers", "Queue", "Jobs/min", "Failures"]
      .map((c) => h("th", {scope: "col"}, c)))),
    records.map((r, i) => rows(r, extra[i]))));
}

function rows(record, {health, metrics, state}) {
  const problems = failing(record);
  const url = (record.status?.jobApiUrl || record.jobApiUrl) ? jobApi(record) : ""; // no trailing /: `${url}/runsync` works
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
    cell("Phase", h("span", {class: `badge ${state.tone}`, title: state.why || null, dataset: {state: state.label}}, state.label)),
    urlCell(record, url),
    cell("Workers",
      h("span", {}, `${workers.running ?? 0} running · ${workers.idle ?? 0} idle`),
      h("div", {class: "hint"}, `min ${record.workersMin} · max ${record.workersMax}`), trouble),
    ...(isLb(record) ? lbCells(health) : [
      cell("Queue", `${queued ?? "—"}`,
        health?.jobs?.inProgress ? h("div", {class: "hint"}, `${health.jobs.inProgress} in progress`) : null,
        health?.waiting ? h("div", {class: "hint waiting"}, `waiting: ${health.waiting}`) : null),
      cell("Jobs/min", stats ? String(stats.perMin) : "—"),
      cell("Failures", stats
        ? h("span", {class: stats.failed ? "bad-text" : null}, `${stats.failed} in 1 h`)
        : (health?.jobs?.failed !== undefined ? String(health.jobs.failed) : "—"))]));
  if (!problems.length) return h("tbody", {}, main);
  return h("tbody", {class: "failing"}, main, h("tr", {class: "problem"},
    h("td", {colspan: 7}, problems.map((c) => h("div", {class: "error", role: "note"},
      h("strong", {}, `${c.reason || c.type}: `), c.message || `${c.type} is False`)))));
}

/** The job API URL (no trailing /: `${url}/runsync` works), or an LB endpoint's LB URL
 * (with its trailing /: the worker's own paths follow it), with a copy button. */
function urlCell(record, jobUrl) {
  const lb = isLb(record);
  const url = lb && jobUrl ? lbUrl(record) : jobUrl;
  if (!url) return cell("URL", h("span", {class: "hint"}, "not yet"));
  return cell("URL", h("div", {class: "url-cell"}, h("code", {class: "url"}, url), copyCell(url, record.id)),
    h("div", {class: "hint"}, lb ? "LB URL: any method and path" : "job API"));
}

/** What an LB endpoint shows where a queue endpoint shows its queue and jobs: requests held
 * for a worker and in flight (its /health); it runs no jobs. */
function lbCells(health) {
  const r = health?.requests;
  return [
    cell("Queue", r ? `${r.held ?? 0} held` : "—", r ? h("div", {class: "hint"}, `${r.inFlight ?? 0} in flight`) : null),
    cell("Jobs/min", h("span", {class: "hint"}, "no jobs (LB)")),
    cell("Failures", "—"),
  ];
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
