// The Metrics page of one endpoint (#/endpoints/{id}/metrics): charts of the last hour of
// GET /v1/endpoints/{id}/metrics (10 s points), refreshed every 10 s. Inline SVG built with
// DOM calls: no library, no inline styles (the CSP forbids them; classes are in health.css).
import {api} from "../api.js";
import {duration, errorBox, h, replace} from "../dom.js";
import {useStyles} from "./health.js";

const REFRESH_MS = 10_000;
const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 200;
const M = {top: 10, right: 12, bottom: 24, left: 48}; // margins for the axes' labels

const CHARTS = [
  {id: "queue", title: "Queue", unit: "jobs", series: [
    ["inQueue", "in queue"], ["inQueueLow", "in queue (lowPriority)"], ["inProgress", "in progress"]]},
  {id: "workers", title: "Workers", unit: "workers", series: [
    ["workersRunning", "running"], ["workersIdle", "idle"], ["workersStarting", "starting"]]},
  {id: "outcomes", title: "Jobs ended per 10 s", unit: "jobs", series: [
    ["completed", "completed"], ["failed", "failed"]]},
  {id: "delay", title: "Queue delay", unit: "ms", format: duration, series: [
    ["delayP50", "p50"], ["delayP95", "p95"]]},
];

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

/** The path of one series (null values break the line) and its lone points: a point with
 * no neighbour (one interval with a value) is drawn as a dot, or it would not show at all. */
function linePath(points, key, x, y) {
  let d = "";
  const dots = [];
  const has = (p) => p && p[key] !== null && p[key] !== undefined;
  points.forEach((p, i) => {
    if (!has(p)) return;
    const [px, py] = [x(p.t).toFixed(1), y(p[key]).toFixed(1)];
    const joined = has(points[i - 1]);
    d += `${joined ? "L" : "M"}${px},${py}`;
    if (!joined && !has(points[i + 1])) dots.push([px, py]);
  });
  return {d, dots};
}

function svgChart(spec, points, width, t0, t1) {
  const fmt = spec.format || ((v) => String(v));
  const top = niceMax(Math.max(0, ...points.flatMap((p) => spec.series.map(([k]) => p[k] ?? 0))));
  const plotW = width - M.left - M.right;
  const plotH = HEIGHT - M.top - M.bottom;
  const x = (t) => M.left + ((t - t0) / Math.max(1, t1 - t0)) * plotW;
  const y = (v) => M.top + plotH - (v / top) * plotH;
  const last = points[points.length - 1] || {};
  const said = spec.series.map(([k, label]) => `${label} ${last[k] === null || last[k] === undefined ? "none" : fmt(last[k])}`);
  const svg = s("svg", {viewBox: `0 0 ${width} ${HEIGHT}`, role: "img",
    "aria-label": `${spec.title}, last hour; now: ${said.join(", ")}`});
  const lead = Math.round(top / 10 ** Math.floor(Math.log10(top)));
  const steps = {1: 5, 2: 4, 5: 5}[lead] || 4; // round steps: 0.2, 0.5 or 1 × 10^n
  for (let i = 0; i <= steps; i++) {
    const v = (top * i) / steps;
    svg.append(s("line", {class: i ? "grid" : "axis", x1: M.left, x2: width - M.right, y1: y(v), y2: y(v)}),
      s("text", {class: "tick", x: M.left - 6, y: y(v) + 4, "text-anchor": "end"}, fmt(Math.round(v * 100) / 100)));
  }
  const ticks = width < 420 ? 3 : 5;
  for (let i = 0; i < ticks; i++) {
    const t = t0 + ((t1 - t0) * i) / (ticks - 1);
    const anchor = i === 0 ? "start" : i === ticks - 1 ? "end" : "middle";
    svg.append(s("text", {class: "tick", x: x(t), y: HEIGHT - 6, "text-anchor": anchor}, clock(t)));
  }
  svg.append(s("line", {class: "axis", x1: M.left, x2: M.left, y1: M.top, y2: M.top + plotH}));
  spec.series.forEach(([key], i) => {
    const {d, dots} = linePath(points, key, x, y);
    if (d) svg.append(s("path", {class: `series s${i}`, d}));
    for (const [cx, cy] of dots) svg.append(s("circle", {class: `dot s${i}`, cx, cy, r: 3}));
  });
  return svg;
}

function legend(spec, points) {
  const fmt = spec.format || ((v) => String(v));
  const last = points[points.length - 1] || {};
  return h("ul", {class: "legend", "aria-label": `${spec.title} legend`},
    spec.series.map(([key, label], i) => h("li", {},
      h("span", {class: `swatch s${i}`, "aria-hidden": "true"}), label,
      h("span", {class: "last"}, last[key] === null || last[key] === undefined ? "—" : fmt(last[key])))));
}

function draw(grid, points) {
  // The charts' drawing width is the width they show at (health.css: columns of at least
  // 520 px, 14 px apart; 34 px of card padding), so their text keeps its size on a phone.
  const columns = Math.max(1, Math.floor((grid.clientWidth + 14) / (520 + 14)));
  const column = (grid.clientWidth - 14 * (columns - 1)) / columns;
  const width = Math.max(280, Math.min(900, Math.floor(column) - 34));
  const t1 = points.length ? points[points.length - 1].t + 10 : Date.now() / 1000;
  const t0 = Math.min(points.length ? points[0].t : t1, t1 - 600); // at least 10 minutes wide
  replace(grid, CHARTS.map((spec) => h("section", {class: "card chart", "aria-labelledby": `chart-${spec.id}`},
    h("h2", {id: `chart-${spec.id}`}, spec.title, h("span", {class: "hint"}, ` (${spec.unit})`)),
    svgChart(spec, points, width, t0, t1), legend(spec, points))));
}

export async function render(view, ctx) {
  useStyles();
  const id = ctx.params.id;
  const note = h("p", {class: "hint"}, "The last hour at 10 s resolution; refreshed every 10 s.");
  const failure = h("div");
  const grid = h("div", {class: "charts"});
  view.append(note, failure, grid);
  ctx.every(REFRESH_MS, async () => {
    try {
      const body = await api(`/v1/endpoints/${encodeURIComponent(id)}/metrics`, {signal: ctx.signal});
      replace(failure);
      if (!body.points.length) {
        replace(grid, h("p", {class: "hint"}, "No history yet: the first point appears 10 s after the endpoint was created."));
        return;
      }
      draw(grid, body.points);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(failure, errorBox(err));
    }
  });
}
