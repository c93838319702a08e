// The Overview page of one endpoint (#/endpoints/{id}): phase, job API URL, what is wrong
// (every False condition, in full), workers in all five /health states (and the last hour's
// workers marked unhealthy, with why), queue counts and a settings summary; refreshed every 5 s. See app.js for render(view, ctx).
import {about, api, commandLineNote, DEV_MODE_NOTE, jobApi} from "../api.js";
import {copyButton, duration, errorBox, h, replace} from "../dom.js";
import {failing} from "./endpoints.js";
import {isLb, lbRequests, lbSettings, lbUrl, lbUrlRow} from "./lb.js";
import {stat, useStyles} from "./health.js";
import {callCard} from "./snippets.js";
import {conditionWrong, endpointState} from "./state.js";

const REFRESH_MS = 5000;

function problems(record, stopped) {
  // a crash loop has its own card (restartCard): the conditions saying it are not repeated
  const wrong = failing(record).filter((c) => !stopped || (c.type !== "CrashLoop" && c.reason !== "CrashLoop"));
  if (!wrong.length) return null;
  return h("section", {class: "card", "aria-labelledby": "problems"},
    h("h2", {id: "problems"}, "Problems"),
    wrong.map((c) => h("div", {class: "error problem", role: "alert"},
      h("strong", {}, `${c.type}: ${c.reason || "False"}`), c.message || "")));
}

function workers(health, record) {
  const w = health?.workers || {};
  const tone = (n, bad) => (n > 0 ? bad : "");
  return h("section", {class: "card", "aria-labelledby": "workers"},
    h("h2", {id: "workers"}, "Workers"),
    h("div", {class: "stats"},
      stat(h, "running", w.running),
      stat(h, "idle", w.idle),
      stat(h, "initializing", w.initializing),
      stat(h, "throttled", w.throttled, tone(w.throttled, "warn")),
      stat(h, "unhealthy", w.unhealthy, tone(w.unhealthy, "bad"))),
    h("p", {class: "hint"}, `min ${record.workersMin} · max ${record.workersMax} · `,
      `idle timeout ${record.idleTimeout} s`),
    marked(health?.unhealthyWorkers));
}

const FAILED = {fitness: "fitness check", startup: "startup", warmup: "warm-up"};

/** /health's `unhealthyWorkers`: the last hour's workers marked unhealthy, and why. */
function marked(list) {
  if (!list?.length) return null;
  const when = (ms) => new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  return h("div", {class: "marked"},
    h("h3", {id: "marked"}, "Marked unhealthy in the last hour"),
    h("div", {class: "table-wrap"}, h("table", {"aria-labelledby": "marked"},
      h("thead", {}, h("tr", {}, ["Worker", "Failed", "Reason", "When", "Now"].map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, list.map((w) => h("tr", {dataset: {worker: w.id}},
        h("td", {class: "mono"}, w.id),
        h("td", {}, `${FAILED[w.kind] || w.kind}${w.check ? ` ${w.check}` : ""}`),
        h("td", {class: "reason"}, w.reason),
        h("td", {class: "mono"}, when(w.at)),
        h("td", {}, h("span", {class: `badge ${w.present ? "bad" : "muted"}`},
          w.present ? "being replaced" : "gone"))))))));
}

function queue(health) {
  const j = health?.jobs || {};
  return h("section", {class: "card", "aria-labelledby": "queue"},
    h("h2", {id: "queue"}, "Jobs"),
    h("div", {class: "stats"},
      stat(h, "in queue", j.inQueue),
      stat(h, "in progress", j.inProgress),
      stat(h, "completed", j.completed),
      stat(h, "failed", j.failed, j.failed > 0 ? "warn" : ""),
      stat(h, "retried", j.retried)));
}

function compute(r) {
  if (r.computeType === "CPU") return `CPU, ${r.vcpuCount} vCPUs${r.cpuFlavorIds?.length ? ` (${r.cpuFlavorIds.join(", ")})` : ""}`;
  return `GPU × ${r.gpuCount}: ${(r.gpuTypeIds || []).join(" → ") || "any type"}`;
}

function settings(r, info) {
  const dev = info?.mode === "dev";
  const rows = [
    ["Worker", r.templateId || "—"],
    ["Compute", dev ? "a local process (dev mode)" : compute(r)],
    ["Workers", `${r.workersMin} – ${r.workersMax}`],
    ["Idle timeout", `${r.idleTimeout} s`],
    ["Execution timeout", `${duration(r.executionTimeoutMs)} (${Math.round(r.executionTimeoutMs / 1000)} s)`],
    ["Scaler", `${r.scalerType} ${r.scalerValue}`],
    ...(dev ? [] : [["FlashBoot", r.flashboot ? "on" : "off"],
      ["Data centres", (r.dataCenterIds || []).join(", ") || "any"]]),
    ...(isLb(r) ? lbSettings(r) : []),
  ];
  const note = commandLineNote(info, r.id);
  return h("section", {class: "card", "aria-labelledby": "settings"},
    h("div", {class: "row"}, h("h2", {id: "settings", class: "grow"}, "Settings"),
      h("a", {class: "button", href: `#/endpoints/${encodeURIComponent(r.id)}/edit`}, "Edit")),
    note ? h("div", {class: "warning command-line-note", role: "note"}, note) : null,
    h("dl", {class: "settings"}, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    dev ? h("p", {class: "hint dev-mode-note"}, DEV_MODE_NOTE) : null);
}

function conditionsTable(conditions) {
  return h("section", {class: "card", "aria-labelledby": "conditions"},
    h("h2", {id: "conditions"}, "Conditions"),
    h("div", {class: "table-wrap"}, h("table", {},
      h("thead", {}, h("tr", {}, ["Type", "Status", "Reason", "Message", "Since"].map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, conditions.map((c) => h("tr", {},
        h("td", {}, c.type),
        h("td", {}, h("span", {class: `badge ${c.status === "Unknown" ? "muted" : conditionWrong(c) ? "bad" : "ok"}`}, c.status)),
        h("td", {}, c.reason || ""), h("td", {}, c.message || ""),
        h("td", {class: "mono"}, c.lastTransitionTime || "")))))));
}

/** What /health's `crashLoop` says of the last failed start, or null. */
function lastFailure(loop) {
  if (!loop) return null;
  const how = loop.exitCode === null || loop.exitCode === undefined ? "marked unhealthy" : `exit code ${loop.exitCode}`;
  return h("dl", {class: "settings crash-facts"},
    h("dt", {}, "Last failed start"), h("dd", {}, how),
    h("dt", {}, "Last line"), h("dd", {}, h("code", {}, loop.lastLine || "—")),
    h("dt", {}, "Failed in a row"), h("dd", {}, String(loop.failedStarts)),
    h("dt", {}, "Since"), h("dd", {class: "mono"}, new Date(loop.since).toISOString()));
}

/** While no worker starts (a crash loop): the state, and a button that clears it. */
function restartCard(record, health, state, failure) {
  if (!state.stopped) return null;
  const restart = async (event) => {
    event.target.disabled = true;
    try {
      await api(`/v2/serverless/${encodeURIComponent(record.id)}/workers/restart`, {method: "POST"});
      replace(failure, h("div", {class: "hint", role: "status"}, "Restart asked: workers start again."));
    } catch (err) {
      replace(failure, errorBox(err));
      event.target.disabled = false;
    }
  };
  return h("section", {class: "card crash-loop", "aria-labelledby": "crash-loop"},
    h("h2", {id: "crash-loop"}, "No worker starts: workers crash at start"),
    lastFailure(health?.crashLoop) || h("p", {}, state.why || "Workers failed to start too often."),
    h("p", {class: "hint"}, "Queued jobs wait. Fix the handler or image (a new release clears this), ",
      "or restart the workers when the cause is gone. ",
      h("a", {href: `#/endpoints/${encodeURIComponent(record.id)}/logs`}, "See the worker logs")),
    h("button", {type: "button", class: "primary restart-workers", onclick: restart}, "Restart workers"));
}

function summary(record, health) {
  const state = endpointState(record, health);
  const url = jobApi(record);
  return h("section", {class: "card", "aria-labelledby": "summary"},
    h("h2", {id: "summary"}, "Endpoint ", h("span", {class: `badge ${state.tone}`, title: state.why || null, dataset: {state: state.label}}, state.label)),
    isLb(record) ? lbUrlRow(record)
      : h("div", {class: "url-row"}, h("span", {class: "hint"}, "Job API"), h("code", {}, url), copyButton(url, "Copy URL")));
}

async function refresh(id, ctx, failure, {head, call, body}) {
  const [record, info] = await Promise.all([
    api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal: ctx.signal}), about()]);
  let health = null;
  try {
    health = await api(`${jobApi(record)}/health`, {signal: ctx.signal, redirect: false});
    replace(failure);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    replace(failure, errorBox(`Health unavailable: ${err.message}`));
  }
  const conditions = record.status?.conditions || [];
  const state = endpointState(record, health);
  replace(head, summary(record, health), restartCard(record, health, state, failure),
    problems(record, state.stopped));
  if (!call.firstChild) { // built once: keeps the chosen tab
    replace(call, isLb(record) ? callCard(lbUrl(record), {lb: true}) : callCard(jobApi(record)));
  }
  replace(body, workers(health, record), isLb(record) ? lbRequests(health) : queue(health),
    settings(record, info), conditionsTable(conditions));
}

export async function render(view, ctx) {
  useStyles();
  const failure = h("div");
  const parts = {head: h("div", {}, h("p", {class: "hint"}, "Loading…")), call: h("div"), body: h("div")};
  view.append(failure, h("div", {class: "overview"}, parts.head, parts.call, parts.body));
  ctx.every(REFRESH_MS, async () => {
    try {
      await refresh(ctx.params.id, ctx, failure, parts);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(failure, errorBox(err));
      if (!parts.call.firstChild) replace(parts.head); // never read: no "Loading…" under the error
    }
  });
}
