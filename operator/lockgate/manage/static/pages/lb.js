// Load-balancing endpoints (type LB, docs/load-balancing.md) in the console: the type choice
// of the settings form, the LB URL, requests held and in flight (from /health), and the
// Requests tab of an LB endpoint: a request of any method, path, headers and body sent
// through the gateway's /lb/{id}/ route, its answer shown with the worker that served it.
import {api, jobApi, send} from "../api.js";
import {copyButton, errorBox, h, replace} from "../dom.js";
import {stat, useStyles} from "./health.js";

const WORKER_ID = "X-Runpod-Worker-Id";
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
const NO_BODY = new Set(["GET", "HEAD"]); // fetch refuses a body on these
const HEALTH_MS = 2000;

/** This module's stylesheet, loaded once (the CSP allows 'self' styles, never inline ones). */
export function useLbStyles() {
  if (document.getElementById("lb-css")) return;
  const link = h("link", {id: "lb-css", rel: "stylesheet", href: new URL("./lb.css", import.meta.url).href});
  document.head.append(link);
}

/** Whether the record is a load-balancing endpoint's. */
export const isLb = (record) => record?.type === "LB";

/** `{base}/lb/{id}/`: where a client sends any request for the endpoint's workers. */
export function lbUrl(record) {
  const base = jobApi(record).replace(/\/v2\/[^/]*$/, "");
  return `${base}/lb/${encodeURIComponent(record.id)}/`;
}

/** The LB URL as the Overview's summary shows it, with a copy button. */
export function lbUrlRow(record) {
  useLbStyles();
  const url = lbUrl(record);
  return h("div", {class: "url-row"}, h("span", {class: "hint"}, "LB URL"),
    h("code", {class: "lb-url"}, url), copyButton(url, "Copy URL"));
}

/** Requests held for a worker and in flight, from an LB endpoint's /health. */
export function lbRequests(health) {
  const r = health?.requests || {};
  return h("section", {class: "card", "aria-labelledby": "lb-requests"},
    h("h2", {id: "lb-requests"}, "Requests"),
    h("div", {class: "stats"},
      stat(h, "held", r.held, r.held > 0 ? "warn" : ""),
      stat(h, "in flight", r.inFlight)),
    h("p", {class: "hint"}, "Held: waiting for a worker to turn healthy (a cold start)."));
}

/** Overview settings rows of an LB endpoint. */
export function lbSettings(r) {
  return [
    ["Type", "Load balancer (LB)"],
    ["Request timeout", `${r.requestTimeoutS} s`],
    ["Hold for a worker", r.lbHoldS === null || r.lbHoldS === undefined ? "the gateway's (LOCKGATE_LB_HOLD_S)" : `${r.lbHoldS} s`],
  ];
}

// --- the settings form: type, and what only LB endpoints have -----------------------------

/**
 * The type choice (chosen at creation; fixed after) and the LB-only settings. An LB
 * endpoint scales on requests: choosing it sets the scaler select to REQUEST_COUNT and
 * locks it. Returns {element, lbFields, payload()}.
 */
export function typeChoice(v, scalerType, {editable = true} = {}) {
  useLbStyles();
  const choices = [
    ["QUEUE", "Queue", "jobs through the job API (/run, /runsync)"],
    ["LB", "Load balancer", "requests proxied to the worker's own HTTP server"],
  ];
  const radios = choices.map(([value]) => h("input", {type: "radio", name: "type", value,
    id: `type-${value}`, checked: (v.type || "QUEUE") === value, disabled: !editable}));
  const timeout = h("input", {type: "number", inputmode: "numeric", id: "requestTimeoutS",
    name: "requestTimeoutS", min: 1, max: 3600, value: v.requestTimeoutS ?? 330});
  const hold = h("input", {type: "number", inputmode: "numeric", id: "lbHoldS", name: "lbHoldS",
    min: 0, max: 3600, value: v.lbHoldS ?? "", placeholder: "the gateway's"});
  const lbFields = h("fieldset", {}, h("legend", {}, "Load balancing"),
    h("div", {class: "grid"},
      h("div", {class: "field", dataset: {field: "requestTimeoutS"}},
        h("label", {for: "requestTimeoutS"}, "Request timeout (s)"), timeout,
        h("p", {class: "hint"}, "A proxied request running longer is answered 504.")),
      h("div", {class: "field", dataset: {field: "lbHoldS"}},
        h("label", {for: "lbHoldS"}, "Hold for a worker (s)"), hold,
        h("p", {class: "hint"}, "How long a request waits for a healthy worker before 503. Empty: the gateway's LOCKGATE_LB_HOLD_S (120 s by default)."))));
  const chosen = () => radios.find((r) => r.checked)?.value || "QUEUE";
  const apply = () => {
    const lb = chosen() === "LB";
    lbFields.hidden = !lb;
    if (lb) scalerType.value = "REQUEST_COUNT";
    scalerType.disabled = lb;
  };
  radios.forEach((r) => r.addEventListener("change", apply));
  apply();
  const element = h("fieldset", {class: "choice"}, h("legend", {}, "Type"),
    choices.map(([value, label, hint], i) => h("label", {class: "inline", for: `type-${value}`},
      radios[i], label, h("span", {class: "hint"}, `(${hint})`))),
    editable ? null : h("p", {class: "hint"}, "The type is chosen when the endpoint is created."));
  const payload = () => {
    if (chosen() !== "LB") return {type: chosen()};
    const number = (input) => (input.value === "" ? input.value : Number(input.value));
    return {type: "LB", requestTimeoutS: number(timeout), lbHoldS: hold.value === "" ? null : number(hold)};
  };
  return {element, lbFields, payload};
}

// --- the Requests tab of an LB endpoint ----------------------------------------------------

/** "Name: value" lines as a header object, or an Error naming the first bad line. */
export function parseHeaders(text) {
  const out = {};
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    const colon = line.indexOf(":");
    const name = colon > 0 ? line.slice(0, colon).trim() : "";
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
      return new Error(`Header line ${i + 1} is not "Name: value": ${line}. Nothing was sent.`);
    }
    out[name] = line.slice(colon + 1).trim();
  }
  return out;
}

/** The Requests tab of an LB endpoint: URL, live counts, request form and answer. */
export async function renderLbRequests(view, ctx, record) {
  useStyles();
  useLbStyles();
  const counts = h("div", {class: "stats", "aria-live": "off"});
  view.append(
    h("div", {class: "card"}, h("h2", {}, "Load-balancing endpoint"), lbUrlRow(record),
      h("p", {class: "hint"}, "Any method and path sent to this URL reaches a worker's own HTTP server; no job API routes here."),
      counts),
    requestForm(record, ctx));
  ctx.every(HEALTH_MS, async () => {
    const health = await api(`${jobApi(record)}/health`, {signal: ctx.signal, redirect: false}).catch(() => null);
    const w = health?.workers || {};
    const r = health?.requests || {};
    replace(counts,
      stat(h, "workers ready", health ? (w.idle || 0) + (w.running || 0) : null),
      stat(h, "initializing", w.initializing),
      stat(h, "unhealthy", w.unhealthy, w.unhealthy > 0 ? "bad" : ""),
      stat(h, "held", r.held, r.held > 0 ? "warn" : ""),
      stat(h, "in flight", r.inFlight));
  });
}

function requestForm(record, ctx) {
  const method = h("select", {id: "lb-method"}, METHODS.map((m) => h("option", {value: m}, m)));
  const path = h("input", {type: "text", id: "lb-path", value: "/", spellcheck: "false", autocomplete: "off"});
  const headers = h("textarea", {id: "lb-headers", rows: 3, spellcheck: "false", placeholder: "Content-Type: application/json"});
  const body = h("textarea", {id: "lb-body", rows: 6, spellcheck: "false"});
  const message = h("div", {"aria-live": "assertive"});
  const answer = h("div", {"aria-live": "polite"});
  const submit = h("button", {type: "submit", class: "primary"}, "Send");
  let running = null;
  const form = h("form", {class: "card", novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    const extra = parseHeaders(headers.value);
    if (extra instanceof Error) return replace(message, errorBox(extra));
    if (NO_BODY.has(method.value) && body.value) {
      return replace(message, errorBox(new Error(`A ${method.value} request has no body: clear it or choose POST, PUT or PATCH. Nothing was sent.`)));
    }
    replace(message);
    running?.abort();
    running = new AbortController();
    const signal = AbortSignal.any([ctx.signal, running.signal]);
    const url = lbUrl(record) + path.value.trim().replace(/^\/+/, "");
    submit.disabled = true;
    const held = async () => {
      const health = await api(`${jobApi(record)}/health`, {signal, redirect: false}).catch(() => null);
      return health?.requests?.held || 0;
    };
    try {
      await exchange(answer, url, {method: method.value, headers: extra, body: body.value || undefined, signal}, held);
    } catch (err) {
      if (err.name !== "AbortError") replace(answer, errorBox(new Error(`Not sent: ${err.message}`)));
    } finally {
      submit.disabled = false;
    }
  }},
    h("h2", {}, "Send a request"),
    h("div", {class: "lb-request"},
      h("div", {}, h("label", {for: "lb-method"}, "Method"), method),
      h("div", {class: "grow"}, h("label", {for: "lb-path"}, "Path"), path)),
    h("label", {for: "lb-headers"}, "Headers"), headers,
    h("p", {class: "hint"}, "One \"Name: value\" per line. The console sends your key in authorization unless you set one; the gateway removes it before the worker."),
    h("label", {for: "lb-body"}, "Body"), body,
    message,
    h("div", {class: "row"}, submit,
      h("span", {class: "hint"}, "Sent through the gateway; a cold start holds it until a worker is healthy.")),
    answer);
  return form;
}

/**
 * Until the answer's headers come: the time since sending, and "held: waiting for a worker
 * (n held)" while the endpoint's /health counts requests held (a cold start), read each
 * second through `held()`. Returns the function that stops it.
 */
function waiting(status, took, held) {
  const started = performance.now();
  let stopped = false;
  const tick = () => replace(took, `${((performance.now() - started) / 1000).toFixed(1)} s`);
  const timer = setInterval(tick, 200);
  (async () => {
    while (!stopped) {
      const n = await held();
      if (stopped) break;
      replace(status, n > 0 ? `held: waiting for a worker (${n} held)` : "SENDING");
      status.className = `badge ${n > 0 ? "warn" : "muted"}`;
      await new Promise((done) => setTimeout(done, 1000));
    }
  })();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}

/** Send one request and show its answer as it arrives: status, worker, time, headers, body. */
async function exchange(where, url, options, held) {
  const status = h("span", {class: "badge muted"}, "SENDING");
  const worker = h("span", {class: "mono lb-worker"});
  const took = h("span", {class: "hint"});
  const shownHeaders = h("pre", {class: "lb-headers", "aria-label": "Answer headers"});
  const shownBody = h("pre", {class: "output", "aria-label": "Answer body"});
  replace(where, h("div", {class: "card lb-answer"},
    h("div", {class: "row"}, h("strong", {}, "Status:"), status, h("strong", {}, "Worker:"), worker, took),
    h("details", {}, h("summary", {}, "Answer headers"), shownHeaders),
    h("h3", {}, "Body"), shownBody));
  const started = performance.now();
  const stopWaiting = waiting(status, took, held);
  let response;
  try {
    response = await send(url, options);
  } finally {
    stopWaiting();
  }
  const tone = response.ok ? "ok" : response.status >= 500 ? "bad" : "warn";
  replace(status, `${response.status} ${response.statusText}`.trim());
  status.className = `badge ${tone}`;
  replace(worker, response.headers.get(WORKER_ID) || "—");
  replace(shownHeaders, [...response.headers].map(([k, v]) => `${k}: ${v}`).join("\n"));
  // Read as it arrives, so a stream (Server-Sent Events) shows event by event.
  let text = "";
  if (response.body) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      text += value;
      replace(shownBody, text);
    }
  }
  replace(took, `${Math.round(performance.now() - started)} ms`);
  if ((response.headers.get("content-type") || "").includes("json")) {
    try {
      replace(shownBody, JSON.stringify(JSON.parse(text), null, 2));
    } catch {
      // not JSON after all: keep the text
    }
  }
  if (!text) replace(shownBody, h("span", {class: "hint"}, "(empty)"));
}
