// The Usage page (#/usage?range=24h|7d|30d|12m, or range=custom&from=&to=&bucket=: UTC days):
// worker-, GPU- and vCPU-seconds per endpoint over the chosen range, and their cost where prices per GPU type are set, as a chart (one bar
// per bucket, a part per endpoint) and a table, and the execution time of each API key's jobs
// (with their GPU- and vCPU-seconds and cost) as a second chart and table, all exportable as CSV. It reads
// GET /v2/billing/serverless and its groupBy=apiKey (the same figures; docs/usage.md says how
// they are measured) and GET /v1/keys for the keys' names.
import {api} from "../api.js";
import {h, replace, toast} from "../dom.js";
import {useStyles} from "./health.js";
import {niceMax} from "./metrics.js";

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 180;
const M = {top: 10, right: 8, bottom: 22, left: 56};
const SERIES = 8; // colours (classes u0…u7 in health.css); more endpoints share the last

// The ranges offered: the last N buckets of a size, the current (unfinished) one included.
export const RANGES = {
  "24h": {label: "Last 24 hours, by hour", bucketSize: "hour", lastN: 24},
  "7d": {label: "Last 7 days, by day", bucketSize: "day", lastN: 7},
  "30d": {label: "Last 30 days, by day", bucketSize: "day", lastN: 30},
  "12m": {label: "Last 12 months, by month", bucketSize: "month", lastN: 12},
};

const MEASURES = {
  workerSeconds: "Worker-seconds",
  gpuSeconds: "GPU-seconds",
  totalAmount: "Cost",
};

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

/** Seconds as hours with one decimal ("1.5 h"), for people. */
export function hours(seconds) {
  return `${(seconds / 3600).toFixed(seconds && seconds < 360 ? 3 : 1)} h`;
}

/** Per-endpoint sums of the records: [{id, workerSeconds, gpuSeconds, gpuSecondsByType,
 * vcpuSeconds, totalAmount}], most worker-seconds first. */
export function byEndpoint(records) {
  const out = {};
  for (const r of records) {
    const e = out[r.serverlessId] ??= {id: r.serverlessId, workerSeconds: 0, gpuSeconds: 0,
      gpuSecondsByType: {}, vcpuSeconds: 0, totalAmount: 0};
    e.workerSeconds += r.workerSeconds;
    e.gpuSeconds += r.gpuSeconds;
    e.vcpuSeconds += r.vcpuSeconds;
    e.totalAmount += r.totalAmount;
    for (const [t, n] of Object.entries(r.gpuSecondsByType || {})) e.gpuSecondsByType[t] = (e.gpuSecondsByType[t] || 0) + n;
  }
  return Object.values(out).sort((a, b) => b.workerSeconds - a.workerSeconds || a.id.localeCompare(b.id));
}

export const NO_KEY = "(no key)"; // jobs submitted without a key (auth off)

/** Per-key sums of the groupBy=apiKey records: [{id, executionSeconds, gpuSeconds,
 * gpuSecondsByType, vcpuSeconds, totalAmount}], most execution first; id NO_KEY for none. */
export function byKey(records) {
  const out = {};
  for (const r of records) {
    const id = r.apiKeyId ?? NO_KEY;
    const k = out[id] ??= {id, executionSeconds: 0, gpuSeconds: 0, gpuSecondsByType: {}, vcpuSeconds: 0, totalAmount: 0};
    k.executionSeconds += r.executionSeconds;
    k.gpuSeconds += r.gpuSeconds;
    k.vcpuSeconds += r.vcpuSeconds;
    k.totalAmount += r.totalAmount;
    for (const [t, n] of Object.entries(r.gpuSecondsByType || {})) k.gpuSecondsByType[t] = (k.gpuSecondsByType[t] || 0) + n;
  }
  return Object.values(out).sort((a, b) => b.executionSeconds - a.executionSeconds || a.id.localeCompare(b.id));
}

const CSV_FIELDS = ["startTime", "endTime", "serverlessId", "apiKeyId", "workerSeconds",
  "executionSeconds", "gpuSeconds", "vcpuSeconds", "gpuAmount", "cpuAmount", "totalAmount"];

/** The records as CSV: a header row, one row per endpoint and bucket, then one per API key
 * and bucket (`keyRecords`, groupBy=apiKey; apiKeyId NO_KEY for none). */
export function csvOf(records, keyRecords = []) {
  const cell = (v) => (/[",\n]/.test(String(v)) ? `"${String(v).replace(/"/g, '""')}"` : String(v));
  const keyed = keyRecords.map((r) => ({...r, apiKeyId: r.apiKeyId ?? NO_KEY}));
  return [CSV_FIELDS.join(","), ...[...records, ...keyed].map((r) => CSV_FIELDS.map((f) => cell(r[f] ?? "")).join(","))].join("\n") + "\n";
}

/** Seconds as text with at most 3 decimals (execution time is counted in ms). */
const secs = (v) => String(Math.round(v * 1000) / 1000);

function keyTable(rows, totals, names, priced) {
  const head = ["API key", "Name", "Execution seconds", "GPU-seconds", "GPU types", "vCPU-seconds",
    ...(priced ? ["Cost"] : [])];
  const cells = (k) => [
    h("td", {class: "num"}, secs(k.executionSeconds)),
    h("td", {class: "num"}, secs(k.gpuSeconds)),
    h("td", {}, Object.entries(k.gpuSecondsByType || {}).map(([t, n]) => `${t}: ${secs(n)} s`).join(", ") || "—"),
    h("td", {class: "num"}, secs(k.vcpuSeconds)),
    priced ? h("td", {class: "num"}, money(k.totalAmount)) : null,
  ];
  return h("div", {class: "table-wrap"}, h("table", {"aria-label": "Usage by API key"},
    h("thead", {}, h("tr", {}, head.map((t) => h("th", {scope: "col"}, t)))),
    h("tbody", {}, rows.map((k, i) => h("tr", {dataset: {key: k.id}},
      h("td", {}, h("span", {class: `swatch u${Math.min(i, SERIES - 1)}`}), h("code", {}, k.id)),
      h("td", {}, names[k.id] || "—"), cells(k)))),
    h("tfoot", {}, h("tr", {}, h("th", {scope: "row", colspan: 2}, "Total"), cells(totals)))));
}

/** The keys' names by id (GET /v1/keys); none when the caller may not list keys. */
async function keyNames(signal) {
  try {
    const keys = await api("/v1/keys", {signal});
    return Object.fromEntries(keys.map((k) => [k.id, k.name]));
  } catch (err) {
    if (err.name === "AbortError") throw err;
    return {};
  }
}

function money(value) {
  return value.toFixed(value && value < 0.01 ? 6 : 2);
}

const SIZE_MS = {hour: 3_600_000, day: 86_400_000, week: 7 * 86_400_000};

/** How many buckets of `size` lie in the window [t0, t1) (epoch ms, on bucket boundaries). */
export function bucketCount(t0, t1, size) {
  if (SIZE_MS[size]) return Math.round((t1 - t0) / SIZE_MS[size]);
  const a = new Date(t0), b = new Date(t1);
  const months = (b.getUTCFullYear() - a.getUTCFullYear()) * 12 + b.getUTCMonth() - a.getUTCMonth();
  return size === "year" ? Math.round(months / 12) : months;
}

/** A chart's series: what names a record's part of a bar, and what the chart's name says. */
const BY_ENDPOINT = {of: (r) => r.serverlessId, label: "endpoint"};
const BY_KEY = {of: (r) => r.apiKeyId ?? NO_KEY, label: "API key"};

/** The per-key record's field for a chosen measure: its jobs' execution time stands for
 * worker-seconds (a key has no workers of its own). */
const keyMeasure = (measure) => (measure === "workerSeconds" ? "executionSeconds" : measure);
const LABELS = {...MEASURES, executionSeconds: "Execution seconds"};

/** The chart: one bar per bucket of the window, split by `series` (an endpoint or an API
 * key, in the order of `order`), of `measure`. */
function chart(body, order, measure, width, series = BY_ENDPOINT) {
  const {startTime, endTime} = body.metadata.query;
  const t0 = Date.parse(startTime), t1 = Date.parse(endTime);
  const count = Math.max(1, bucketCount(t0, t1, body.metadata.query.bucketSize));
  const totals = {};
  for (const r of body.records) totals[r.startTime] = (totals[r.startTime] || 0) + r[measure];
  const top = niceMax(Math.max(0, ...Object.values(totals)));
  const plotW = width - M.left - M.right, plotH = HEIGHT - M.top - M.bottom;
  const slot = plotW / count;
  const x = (t) => M.left + ((t - t0) / (t1 - t0)) * plotW;
  const y = (v) => M.top + plotH - (v / top) * plotH;
  const svg = s("svg", {viewBox: `0 0 ${width} ${HEIGHT}`, class: "usage-chart", role: "img",
    "aria-label": `${LABELS[measure]} per ${body.metadata.query.bucketSize}, by ${series.label}`});
  for (const v of [0, top / 2, top]) {
    svg.append(s("line", {x1: M.left, x2: width - M.right, y1: y(v), y2: y(v), class: "grid"}),
      s("text", {x: M.left - 6, y: y(v) + 4, "text-anchor": "end", class: "tick"},
        measure === "totalAmount" ? money(v) : top < 10 ? `${+v.toFixed(2)} s` : top < 3600 ? `${Math.round(v)} s` : hours(v)));
  }
  const stacked = {};
  for (const r of body.records) {
    const below = stacked[r.startTime] || 0;
    stacked[r.startTime] = below + r[measure];
    const i = Math.min(order.indexOf(series.of(r)), SERIES - 1);
    const left = x(Date.parse(r.startTime)) + slot * 0.15;
    svg.append(s("rect", {x: left, width: Math.max(1, slot * 0.7), y: y(below + r[measure]),
      height: Math.max(0, y(below) - y(below + r[measure])), class: `bar u${i}`},
      s("title", {}, `${series.of(r)}, ${r.startTime}: ${measure === "totalAmount" ? money(r[measure]) : `${r[measure]} s`}`)));
  }
  const fmt = (t) => new Date(t).toISOString().slice(5, body.metadata.query.bucketSize === "hour" ? 16 : 10).replace("T", " ");
  svg.append(s("text", {x: M.left, y: HEIGHT - 6, class: "tick"}, fmt(t0)),
    s("text", {x: width - M.right, y: HEIGHT - 6, "text-anchor": "end", class: "tick"}, `${fmt(t1)} UTC`));
  return svg;
}

function table(rows, totals, priced) {
  const head = ["Endpoint", "Worker-seconds", "Worker-hours", "GPU-seconds", "GPU types", "vCPU-seconds",
    ...(priced ? ["Cost"] : [])];
  const cells = (e) => [
    h("td", {class: "num"}, String(e.workerSeconds)),
    h("td", {class: "num"}, hours(e.workerSeconds)),
    h("td", {class: "num"}, String(e.gpuSeconds)),
    h("td", {}, Object.entries(e.gpuSecondsByType || {}).map(([t, n]) => `${t}: ${n} s`).join(", ") || "—"),
    h("td", {class: "num"}, String(e.vcpuSeconds)),
    priced ? h("td", {class: "num"}, money(e.totalAmount)) : null,
  ];
  return h("div", {class: "table-wrap"}, h("table", {"aria-label": "Usage by endpoint"},
    h("thead", {}, h("tr", {}, head.map((t) => h("th", {scope: "col"}, t)))),
    h("tbody", {}, rows.map((e, i) => h("tr", {dataset: {endpoint: e.id}},
      h("td", {}, h("span", {class: `swatch u${Math.min(i, SERIES - 1)}`}),
        h("a", {href: `#/endpoints/${encodeURIComponent(e.id)}`}, e.id)),
      cells(e)))),
    h("tfoot", {}, h("tr", {dataset: {endpoint: ""}}, h("th", {scope: "row"}, "Total"), cells(totals)))));
}

const BUCKETS = ["hour", "day", "week", "month"];
const DAY_MS = 86_400_000;

/** The billing query of the page's hash query: a preset's lastN, or a custom range of UTC
 * days [from, to] (both included); null when a custom range is not valid yet. */
export function billingQuery(query) {
  const chosen = query.get("range");
  if (chosen !== "custom") {
    const range = RANGES[chosen] || RANGES["24h"];
    return new URLSearchParams({bucketSize: range.bucketSize, lastN: String(range.lastN)});
  }
  const from = Date.parse(`${query.get("from")}T00:00:00Z`), to = Date.parse(`${query.get("to")}T00:00:00Z`);
  const bucket = BUCKETS.includes(query.get("bucket")) ? query.get("bucket") : "day";
  if (Number.isNaN(from) || Number.isNaN(to) || from > to) return null;
  return new URLSearchParams({bucketSize: bucket, startTime: new Date(from).toISOString().replace(".000", ""),
    endTime: new Date(to + DAY_MS).toISOString().replace(".000", "")});
}

export async function render(view, ctx) {
  useStyles();
  const chosen = RANGES[ctx.query.get("range")] || ctx.query.get("range") === "custom" ? ctx.query.get("range") : "24h";
  const picker = h("select", {id: "usage-range"}, Object.entries(RANGES).map(([k, r]) =>
    h("option", {value: k, selected: k === chosen}, r.label)),
    h("option", {value: "custom", selected: chosen === "custom"}, "Custom range (UTC days)"));
  const today = new Date().toISOString().slice(0, 10);
  const from = h("input", {id: "usage-from", type: "date", value: ctx.query.get("from") || new Date(Date.now() - 6 * DAY_MS).toISOString().slice(0, 10)});
  const to = h("input", {id: "usage-to", type: "date", value: ctx.query.get("to") || today});
  const bucket = h("select", {id: "usage-bucket"}, BUCKETS.map((b) =>
    h("option", {value: b, selected: b === (ctx.query.get("bucket") || "day")}, `by ${b}`)));
  const customHash = () => `#/usage?${new URLSearchParams({range: "custom", from: from.value, to: to.value, bucket: bucket.value})}`;
  const custom = h("form", {class: "row usage-bar", hidden: chosen !== "custom", onsubmit: (event) => {
    event.preventDefault();
    ctx.go(customHash());
  }}, h("label", {for: "usage-from"}, "From"), from, h("label", {for: "usage-to"}, "to"), to,
  h("label", {for: "usage-bucket"}, "Buckets"), bucket, h("button", {type: "submit"}, "Show"));
  picker.addEventListener("change", () => {
    if (picker.value === "custom") custom.hidden = false;
    else ctx.go(`#/usage?range=${picker.value}`);
  });
  const measure = h("select", {id: "usage-measure"}, Object.entries(MEASURES).map(([k, label]) =>
    h("option", {value: k}, label)));
  const exportButton = h("button", {type: "button"}, "Export CSV");
  const out = h("div", {}, h("p", {class: "hint"}, "Loading…"));
  replace(view, h("h1", {}, "Usage"),
    h("p", {class: "hint"}, "Worker-, GPU- and vCPU-seconds per endpoint, from ",
      h("code", {}, "GET /v2/billing/serverless"), ", sampled every 10 s (docs/usage.md). ",
      "Cost shows where prices per GPU type are set (LOCKGATE_GPU_PRICES)."),
    h("div", {class: "row usage-bar"}, h("label", {for: "usage-range"}, "Range"), picker,
      h("label", {for: "usage-measure"}, "Chart"), measure, exportButton),
    custom, out);

  const params = billingQuery(ctx.query);
  if (!params) return replace(out, h("p", {class: "hint"}, "Choose a From day on or before the To day."));
  const keyParams = new URLSearchParams(params);
  keyParams.set("groupBy", "apiKey");
  const [body, keyed, names] = await Promise.all([
    api(`/v2/billing/serverless?${params}`, {signal: ctx.signal}),
    api(`/v2/billing/serverless?${keyParams}`, {signal: ctx.signal}),
    keyNames(ctx.signal),
  ]);
  const rows = byEndpoint(body.records);
  const keyRows = byKey(keyed.records);
  const order = rows.map((e) => e.id);
  const priced = body.metadata.totals.totalAmount > 0;
  const {startTime, endTime} = body.metadata.query;
  const chartBox = h("div", {class: "card chart"});
  const keyChartBox = h("div", {class: "card chart"});
  const keyOrder = keyRows.map((k) => k.id);
  const drawChart = () => {
    const width = Math.max(320, view.clientWidth - 40);
    replace(chartBox, chart(body, order, measure.value, width));
    replace(keyChartBox, chart(keyed, keyOrder, keyMeasure(measure.value), width, BY_KEY));
  };
  measure.addEventListener("change", drawChart);
  exportButton.addEventListener("click", () => {
    const url = URL.createObjectURL(new Blob([csvOf(body.records, keyed.records)], {type: "text/csv"}));
    const a = h("a", {href: url, download: `lockgate-usage-${startTime.slice(0, 13)}-${endTime.slice(0, 13)}.csv`, hidden: true});
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
    toast(`${body.records.length} record${body.records.length === 1 ? "" : "s"} exported`);
  });
  replace(out,
    h("p", {class: "hint", role: "status"}, `${startTime} to ${endTime} (UTC): `,
      `${rows.length} endpoint${rows.length === 1 ? "" : "s"}, ${body.metadata.totals.workerSeconds} worker-seconds`,
      priced ? `, cost ${money(body.metadata.totals.totalAmount)}` : " (no prices set: no cost)"),
    rows.length ? [chartBox, table(rows, {...body.metadata.totals}, priced)]
      : h("p", {class: "hint"}, "No endpoint ran a worker in this range."),
    h("h2", {}, "By API key"),
    h("p", {class: "hint"}, "The execution time of the jobs each key submitted (ended by their worker in the range), ",
      "and their GPU- and vCPU-seconds at their endpoints' rates. ", h("code", {}, NO_KEY),
      ": jobs submitted without a key."),
    keyRows.length ? [keyChartBox, keyTable(keyRows, {...keyed.metadata.totals}, names, keyed.metadata.totals.totalAmount > 0)]
      : h("p", {class: "hint"}, "No job ended in this range."));
  if (rows.length || keyRows.length) drawChart();
}
