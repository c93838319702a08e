// The Overview page of one endpoint (#/endpoints/{id}): phase, job API URL, what is wrong
// (every False condition, in full), workers in all five /health states, queue counts and a
// settings summary; refreshed every 5 s. See app.js for render(view, ctx).
import {api, jobApi} from "../api.js";
import {copyButton, duration, errorBox, h, replace} from "../dom.js";
import {failing} from "./endpoints.js";
import {isLb, lbRequests, lbSettings, lbUrlRow} from "./lb.js";
import {stat, useStyles} from "./health.js";

const REFRESH_MS = 5000;
const PHASE_TONE = {Ready: "ok", Failed: "bad", Degraded: "warn", Pending: "warn"};

function problems(record) {
  const wrong = failing(record);
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
      `idle timeout ${record.idleTimeout} s`));
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

function settings(r) {
  const rows = [
    ["Worker", r.templateId || "—"],
    ["Compute", compute(r)],
    ["Workers", `${r.workersMin} – ${r.workersMax}`],
    ["Idle timeout", `${r.idleTimeout} s`],
    ["Execution timeout", duration(r.executionTimeoutMs)],
    ["Scaler", `${r.scalerType} ${r.scalerValue}`],
    ["FlashBoot", r.flashboot ? "on" : "off"],
    ["Data centres", (r.dataCenterIds || []).join(", ") || "any"],
    ...(isLb(r) ? lbSettings(r) : []),
  ];
  return h("section", {class: "card", "aria-labelledby": "settings"},
    h("div", {class: "row"}, h("h2", {id: "settings", class: "grow"}, "Settings"),
      h("a", {class: "button", href: `#/endpoints/${encodeURIComponent(r.id)}/edit`}, "Edit")),
    h("dl", {class: "settings"}, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
}

function conditionsTable(conditions) {
  return h("section", {class: "card", "aria-labelledby": "conditions"},
    h("h2", {id: "conditions"}, "Conditions"),
    h("div", {class: "table-wrap"}, h("table", {},
      h("thead", {}, h("tr", {}, ["Type", "Status", "Reason", "Message", "Since"].map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, conditions.map((c) => h("tr", {},
        h("td", {}, c.type),
        h("td", {}, h("span", {class: `badge ${c.status === "True" ? "ok" : c.status === "False" ? "bad" : "muted"}`}, c.status)),
        h("td", {}, c.reason || ""), h("td", {}, c.message || ""),
        h("td", {class: "mono"}, c.lastTransitionTime || "")))))));
}

function summary(record) {
  const status = record.status || {};
  const url = record.jobApiUrl || status.jobApiUrl || jobApi(record);
  return h("section", {class: "card", "aria-labelledby": "summary"},
    h("h2", {id: "summary"}, "Endpoint ", h("span", {class: `badge ${PHASE_TONE[status.phase] || "muted"}`}, status.phase || "Unknown")),
    isLb(record) ? lbUrlRow(record)
      : h("div", {class: "url-row"}, h("span", {class: "hint"}, "Job API"), h("code", {}, url), copyButton(url, "Copy URL")));
}

async function refresh(id, ctx, failure, body) {
  const record = await api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal: ctx.signal});
  let health = null;
  try {
    health = await api(`${jobApi(record)}/health`, {signal: ctx.signal, redirect: false});
    replace(failure);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    replace(failure, errorBox(`Health unavailable: ${err.message}`));
  }
  const conditions = record.status?.conditions || [];
  replace(body, summary(record), problems(record), workers(health, record),
    isLb(record) ? lbRequests(health) : queue(health),
    settings(record), conditionsTable(conditions));
}

export async function render(view, ctx) {
  useStyles();
  const failure = h("div");
  const body = h("div", {class: "overview"}, h("p", {class: "hint"}, "Loading…"));
  view.append(failure, body);
  ctx.every(REFRESH_MS, async () => {
    try {
      await refresh(ctx.params.id, ctx, failure, body);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(failure, errorBox(err));
    }
  });
}
