// The Metrics page of one endpoint (#/endpoints/{id}/metrics?range=15m|1h|6h|24h): charts of
// GET /v1/endpoints/{id}/metrics (10 s points for an hour, minute points for a day: what the
// store keeps, see docs/operations.md), refreshed every 10 s. Inline SVG built with
// DOM calls: no library, no inline styles (the CSP forbids them; classes are in health.css).
import {api} from "../api.js";
import {duration, errorBox, h, replace} from "../dom.js";
import {useStyles} from "./health.js";

const REFRESH_MS = 10_000;
const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 200;
const M = {top: 10, right: 12, bottom: 24, left: 48}; // margins for the axes' labels
const LABEL_HALF = 28; // half the width of a time label ("07:30 AM" at 11 px)

// The ranges offered, each read at a resolution the store keeps that long (10 s points for
// an hour, minute points for a day); `per` and `span` say what one point covers.
export const RANGES = {
  "15m": {label: "15 min", seconds: 900, interval: 10, per: "10 s", span: "10 s interval"},
  "1h": {label: "1 h", seconds: 3600, interval: 10, per: "10 s", span: "10 s interval"},
  "6h": {label: "6 h", seconds: 21600, interval: 60, per: "minute", span: "minute"},
  "24h": {label: "24 h", seconds: 86400, interval: 60, per: "minute", span: "minute"},
};
const DEFAULT_RANGE = "1h";

// Each chart says what one of its points is and what its legend's numbers are: gauges are read
// as an interval ends (legend: the newest point), counts are summed over the range, delays are
// the highest point in the range. The times have no point where no job was taken (or ended):
// their lines join the points on either side of such gaps (`bridge`). A series is
// [key, label, options]: `summary` when it differs from the chart's, `level` for a gauge among
// counts (drawn dashed), `tone` the colour (s0-s5) when not its place in the list.
const CHARTS = [
  {id: "queue", title: () => "Queue", unit: "jobs", summary: "now", point: (span) => `jobs as a ${span} ends`,
    series: [["inQueue", "in queue"], ["inQueueLow", "in queue (lowPriority)"], ["inProgress", "in progress"]]},
  {id: "workers", title: () => "Workers", unit: "workers", summary: "now", point: (span) => `workers as a ${span} ends`,
    series: [["workersRunning", "running"], ["workersIdle", "idle"], ["workersStarting", "starting"],
      ["workersThrottled", "throttled", {tone: 4}], ["workersUnhealthy", "unhealthy", {tone: 3}]]},
  {id: "coldstarts", title: (per) => `Cold starts per ${per}`, unit: "workers", summary: "total",
    point: (span) => `workers new to the endpoint (their first heartbeat) during a ${span}`,
    series: [["coldStarts", "cold starts"]]},
  {id: "coldstart", title: () => "Cold-start time", unit: "ms", format: duration, summary: "max", bridge: true,
    point: (span) => `percentile of the workers first heard from during a ${span}, from their start (process spawned, pod created) to their first call (none: no point)`,
    series: [["coldStartP50", "p50"], ["coldStartP95", "p95"]]},
  {id: "jobs", title: () => "Jobs by state", unit: "jobs", summary: "total",
    point: (span) => `jobs that ended during a ${span}, by final state; dashed: jobs in queue and in progress as it ends`,
    series: [["completed", "completed", {tone: 2}], ["failed", "failed", {tone: 3}],
      ["timedOut", "timed out", {tone: 1}], ["cancelled", "cancelled", {tone: 5}],
      ["inQueue", "in queue", {summary: "now", level: true, tone: 0}],
      ["inProgress", "in progress", {summary: "now", level: true, tone: 4}]]},
  {id: "execution", title: () => "Execution time", unit: "ms", format: duration, summary: "max", bridge: true,
    point: (span) => `percentile of the jobs that ended during a ${span} (none: no point)`,
    series: [["executionP50", "p50"], ["executionP95", "p95"]]},
  {id: "delay", title: () => "Queue delay", unit: "ms", format: duration, summary: "max", bridge: true,
    point: (span) => `percentile of the jobs taken during a ${span} (none: no point)`,
    series: [["delayP50", "p50"], ["delayP95", "p95"]]},
];

/** The range asked for in the URL (`?range=`), or the default one. */
export function rangeOf(query) {
  const asked = query.get("range");
  return Object.hasOwn(RANGES, asked) ? asked : DEFAULT_RANGE;
}

/** Round times (epoch seconds, multiples of the step) between t0 and t1: a step of 1, 2, 5,
 * 10, 15 or 30 minutes or 1, 2, 3 or 6 hours, the smallest giving at most `most` ticks. */
export function timeTicks(t0, t1, most) {
  const steps = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600];
  const step = steps.find((st) => Math.floor(t1 / st) - Math.ceil(t0 / st) + 1 <= most) || steps.at(-1);
  const ticks = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
  return ticks;
}

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  el.append(...children);
  return el;
}

/** A round upper bound for the y axis (1, 2, 5 × 10^n), at least 1. */
export function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * step).find((v) => v >= value);
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
}

/** The path of one series and its lone points. Without `bridge`, null values break the line;
 * with it, the points that have a value are joined across the gaps. A point with no neighbour
 * to join is drawn as a dot, or it would not show at all. */
export function linePath(points, key, x, y, bridge = false) {
  const has = (p) => p && p[key] !== null && p[key] !== undefined;
  const shown = bridge ? points.filter(has) : points;
  let d = "";
  const dots = [];
  shown.forEach((p, i) => {
    if (!has(p)) return;
    const [px, py] = [x(p.t).toFixed(1), y(p[key]).toFixed(1)];
    const joined = has(shown[i - 1]);
    d += `${joined ? "L" : "M"}${px},${py}`;
    if (!joined && !has(shown[i + 1])) dots.push([px, py]);
  });
  return {d, dots};
}

/** The legend's number of one series over the range's points: the newest value ("now"), the
 * sum ("total") or the highest ("max"); null when no point has a value. */
export function summarize(points, key, how) {
  const values = points.map((p) => p[key]).filter((v) => v !== null && v !== undefined);
  if (!values.length) return null;
  if (how === "total") return values.reduce((a, b) => a + b, 0);
  if (how === "max") return Math.max(...values);
  const newest = points[points.length - 1][key];
  return newest === undefined ? null : newest;
}

/** A chart's series as {key, label, summary, level, tone} (see CHARTS). */
export function seriesOf(spec) {
  return spec.series.map(([key, label, o = {}], i) =>
    ({key, label, summary: o.summary || spec.summary, level: !!o.level, tone: o.tone ?? i}));
}

function svgChart(spec, points, width, t0, t1, rangeLabel) {
  const fmt = spec.format || ((v) => String(v));
  const series = seriesOf(spec);
  const top = niceMax(Math.max(0, ...points.flatMap((p) => series.map(({key}) => p[key] ?? 0))));
  const plotW = width - M.left - M.right;
  const plotH = HEIGHT - M.top - M.bottom;
  const x = (t) => M.left + ((t - t0) / Math.max(1, t1 - t0)) * plotW;
  const y = (v) => M.top + plotH - (v / top) * plotH;
  const said = series.map(({key, label, summary}) => {
    const v = summarize(points, key, summary);
    return `${label} ${summary === spec.summary ? "" : `${summary} `}${v === null ? "none" : fmt(v)}`;
  });
  const svg = s("svg", {viewBox: `0 0 ${width} ${HEIGHT}`, role: "img",
    "aria-label": `${spec.title}, last ${rangeLabel}; ${spec.summary}: ${said.join(", ")}`});
  const lead = Math.round(top / 10 ** Math.floor(Math.log10(top)));
  const steps = {1: 5, 2: 4, 5: 5}[lead] || 4; // round steps: 0.2, 0.5 or 1 × 10^n
  for (let i = 0; i <= steps; i++) {
    const v = (top * i) / steps;
    svg.append(s("line", {class: i ? "grid" : "axis", x1: M.left, x2: width - M.right, y1: y(v), y2: y(v)}),
      s("text", {class: "tick", x: M.left - 6, y: y(v) + 4, "text-anchor": "end"}, fmt(Math.round(v * 100) / 100)));
  }
  for (const t of timeTicks(t0, t1, width < 420 ? 4 : 8)) {
    svg.append(s("line", {class: "grid", x1: x(t), x2: x(t), y1: M.top, y2: M.top + plotH}));
    // A label centred on its tick; one too near an end to fit is left out (its line stays).
    if (x(t) - M.left >= LABEL_HALF && width - x(t) >= LABEL_HALF) {
      svg.append(s("text", {class: "tick time", "data-t": t, x: x(t), y: HEIGHT - 6, "text-anchor": "middle"}, clock(t)));
    }
  }
  svg.append(s("line", {class: "axis", x1: M.left, x2: M.left, y1: M.top, y2: M.top + plotH}));
  for (const {key, level, tone} of series) {
    const {d, dots} = linePath(points, key, x, y, spec.bridge);
    if (d) svg.append(s("path", {class: `series s${tone}${level ? " level" : ""}`, d}));
    for (const [cx, cy] of dots) svg.append(s("circle", {class: `dot s${tone}`, cx, cy, r: 3}));
  }
  return svg;
}

function legend(spec, points) {
  const fmt = spec.format || ((v) => String(v));
  return h("div", {},
    h("ul", {class: "legend", "aria-label": `${spec.title} legend`},
      seriesOf(spec).map(({key, label, summary, level, tone}) => {
        const v = summarize(points, key, summary);
        return h("li", {},
          h("span", {class: `swatch s${tone}${level ? " level" : ""}`, "aria-hidden": "true"}), label,
          h("span", {class: "last"}, `${summary} ${v === null ? "—" : fmt(v)}`));
      })),
    h("p", {class: "hint point"}, `Each point: ${spec.point}.`));
}

function draw(grid, points, range) {
  // The charts' drawing width is the width they show at (health.css: columns of at least
  // 520 px, 14 px apart; 34 px of card padding), so their text keeps its size on a phone.
  const columns = Math.max(1, Math.floor((grid.clientWidth + 14) / (520 + 14)));
  const column = (grid.clientWidth - 14 * (columns - 1)) / columns;
  const width = Math.max(280, Math.min(900, Math.floor(column) - 34));
  // The whole range, ending where the newest point's interval ends.
  const r = RANGES[range];
  const t1 = points[points.length - 1].t + r.interval;
  const t0 = t1 - r.seconds;
  const shown = points.filter((p) => p.t >= t0);
  const specs = CHARTS.map((c) => ({...c, title: c.title(r.per), point: c.point(r.span)}));
  replace(grid, specs.map((spec) => h("section", {class: "card chart", "aria-labelledby": `chart-${spec.id}`},
    h("h2", {id: `chart-${spec.id}`}, spec.title, h("span", {class: "hint"}, ` (${spec.unit})`)),
    svgChart(spec, shown, width, t0, t1, r.label), legend(spec, shown))));
}

function rangePicker(id, chosen, onPick) {
  const buttons = Object.entries(RANGES).map(([key, {label}]) => {
    const button = h("button", {type: "button", "aria-pressed": String(key === chosen)}, label);
    button.addEventListener("click", () => {
      buttons.forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      history.replaceState(null, "", `#/endpoints/${encodeURIComponent(id)}/metrics?range=${key}`);
      onPick(key);
    });
    return button;
  });
  return h("div", {class: "row range", role: "group", "aria-label": "Range"}, buttons);
}

export async function render(view, ctx) {
  useStyles();
  const id = ctx.params.id;
  let range = rangeOf(ctx.query);
  let points = [];
  const note = h("p", {class: "hint"},
    "15 min and 1 h: 10 s points (an hour is kept); 6 h and 24 h: minute points (a day is kept). Refreshed every 10 s.");
  const failure = h("div");
  const grid = h("div", {class: "charts"});
  const show = () => {
    if (points.length) return draw(grid, points, range);
    const first = RANGES[range].interval === 60 ? "after the first full minute" : "10 s after the endpoint was created";
    replace(grid, h("p", {class: "hint"}, `No history yet: the first point appears ${first}.`));
  };
  const load = async () => {
    const asked = range;
    try {
      const path = `/v1/endpoints/${encodeURIComponent(id)}/metrics?interval=${RANGES[asked].interval}`;
      const body = await api(path, {signal: ctx.signal});
      if (asked !== range) return; // another range was picked meanwhile: its own load shows it
      replace(failure);
      points = body.points;
      show();
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(failure, errorBox(err));
    }
  };
  const pick = (picked) => {
    const again = RANGES[picked].interval !== RANGES[range].interval;
    range = picked;
    if (again) {
      points = [];
      replace(grid, h("p", {class: "hint"}, "Loading…"));
      load().catch(() => {});
    } else {
      show();
    }
  };
  view.append(rangePicker(id, range, pick), note, failure, grid);
  ctx.every(REFRESH_MS, load);
}
