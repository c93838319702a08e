// The Batches tab (docs/batch-jobs.md): the endpoint's Batch Jobs, newest first (GET
// {jobApi}/batch, read again every REFRESH_MS), each with its progress (a bar: completed,
// failed and in progress of its total), Cancel while it is a DRAFT or runs (POST …/cancel,
// after a confirmation), and its requests a page at a time (GET …/batch/{id}/requests),
// each opening the request inspector of its job on the batch pool (requests.js jobDetail).
import {api, jobApi} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";
import {useStyles as useHealthStyles} from "./health.js";
import {isLb} from "./lb.js";
import {jobDetail} from "./requests.js";

const REFRESH_MS = 2000;
const PAGE = 20;
const TONE = {FINALIZED: "warn", FAILED: "bad", CANCELLED: "muted", DRAFT: "muted", DONE: "ok"};

/** Load the tab's stylesheet once (CSP: our own files only). */
function useStyles() {
  if (document.getElementById("batches-css")) return;
  const href = new URL("./batches.css", import.meta.url).href;
  document.head.append(h("link", {id: "batches-css", rel: "stylesheet", href}));
}

/** What a batch's badge says: its status, or DONE for a FINALIZED batch that ended well. */
export function shownStatus(batch) {
  return batch.status === "FINALIZED" && batch.doneAt ? "DONE" : batch.status;
}

/** The bar's parts as percentages of the total: [completed, failed, in progress]. */
export function barParts(batch) {
  const total = batch.requestTotal || 0;
  if (!total) return [0, 0, 0];
  const pct = (n) => Math.max(0, Math.min(100, (100 * n) / total));
  return [pct(batch.requestCompleted), pct(batch.requestFailed), pct(batch.requestInProgress)];
}

/** Whether Cancel applies: a DRAFT, or a FINALIZED batch still running. */
export function cancellable(batch) {
  return batch.status === "DRAFT" || (batch.status === "FINALIZED" && !batch.doneAt);
}

function progress(batch) {
  const [done, failed, running] = barParts(batch);
  const part = (cls, pct) => {
    const el = h("span", {class: `part ${cls}`});
    el.style.width = `${pct}%`; // CSSOM, not a style attribute: allowed by the CSP
    return el;
  };
  const text = `${batch.requestCompleted} completed, ${batch.requestFailed} failed, `
    + `${batch.requestInProgress} in progress of ${batch.requestTotal}`;
  return h("div", {class: "batch-progress"},
    h("div", {class: "bar", role: "img", "aria-label": `Progress of ${batch.id}: ${text}`},
      part("completed", done), part("failed", failed), part("running", running)),
    h("span", {class: "hint"}, text));
}

export async function render(view, ctx) {
  useStyles();
  useHealthStyles(); // the inspector's facts are a dl.settings
  const id = ctx.params.id;
  const record = await api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal: ctx.signal});
  if (isLb(record)) {
    replace(view, h("h2", {}, "Batches"),
      h("p", {}, "A load-balancing endpoint takes no jobs, so no batches: Batch Jobs are for queue endpoints."));
    return;
  }
  const base = jobApi(record);
  const call = (path, opts = {}) => api(`${base}/${path}`, {signal: ctx.signal, ...opts});
  const body = h("tbody");
  const message = h("div", {"aria-live": "polite"});
  const detail = h("section", {class: "batch-requests", hidden: true});
  let shown = null;
  let opened = null; // {batch, offset}

  async function cancel(batch) {
    const dialog = h("dialog", {"aria-labelledby": "cancel-batch-title"},
      h("h2", {id: "cancel-batch-title"}, `Cancel batch ${batch.name || batch.id}?`),
      h("p", {}, "Its queued requests are cancelled; the running ones finish, then the batch is CANCELLED."),
      h("form", {method: "dialog", class: "row"},
        h("button", {type: "submit", value: "keep"}, "Keep it running"),
        h("button", {type: "submit", value: "cancel", class: "danger"}, "Cancel batch")));
    document.body.append(dialog);
    dialog.addEventListener("close", async () => {
      dialog.remove();
      if (dialog.returnValue !== "cancel") return;
      try {
        await call(`batch/${encodeURIComponent(batch.id)}/cancel`, {method: "POST"});
        toast(`Batch ${batch.id} cancelled`);
        await refresh();
      } catch (err) {
        if (err.name !== "AbortError") toast(err.message);
      }
    });
    dialog.showModal();
  }

  function row(batch) {
    const status = shownStatus(batch);
    return h("tr", {dataset: {batch: batch.id}},
      h("td", {}, batch.name ? [h("div", {}, batch.name), h("div", {class: "mono hint"}, batch.id)] : h("span", {class: "mono"}, batch.id)),
      h("td", {}, h("span", {class: `badge ${TONE[status] || "muted"}`}, status),
        batch.webhook && h("div", {class: "hint"}, `webhook: ${batch.webhook.toLowerCase().replace("_", " ")}`)),
      h("td", {}, progress(batch)),
      h("td", {}, new Date(batch.createdAt).toLocaleString()),
      h("td", {class: "batch-actions"},
        h("button", {type: "button", class: "small", "aria-label": `Requests of ${batch.id}`,
          onclick: () => { opened = {batch, offset: 0}; showRequests(); }}, "Requests"),
        cancellable(batch) && h("button", {type: "button", class: "small danger",
          "aria-label": `Cancel ${batch.id}`, onclick: () => cancel(batch)}, "Cancel")));
  }

  async function refresh() {
    try {
      const page = await call("batch?limit=50");
      const text = JSON.stringify(page.batches);
      if (text !== shown) {
        shown = text;
        replace(body, page.batches.length
          ? page.batches.map(row)
          : h("tr", {}, h("td", {colspan: 5, class: "hint"}, "No batches yet: POST an array of {\"input\": …} to /batch (docs/batch-jobs.md).")));
      }
      replace(message);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(message, errorBox(err));
    }
  }

  async function showRequests() {
    const {batch, offset} = opened;
    detail.hidden = false;
    let page;
    try {
      page = await call(`batch/${encodeURIComponent(batch.id)}/requests?offset=${offset}&limit=${PAGE}`);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(detail, errorBox(err));
      return;
    }
    const pool = page.poolEndpointId;
    const poolApi = `${base.replace(/\/v2\/[^/]+$/, "")}/v2/${encodeURIComponent(pool)}`;
    const poolCall = (path, opts = {}) => api(`${poolApi}/${path}`, {signal: ctx.signal, ...opts});
    const when = (ts) => (ts ? new Date(ts).toLocaleString() : "—");
    const inspector = h("div", {class: "batch-inspector"});
    const rows = page.requests.map((child) => h("tr", {dataset: {request: child.id}},
      h("td", {class: "mono"}, child.id),
      h("td", {}, h("span", {class: `badge ${child.status === "COMPLETED" ? "ok" : ["FAILED", "TIMED_OUT"].includes(child.status) ? "bad" : "muted"}`}, child.status)),
      h("td", {}, when(child.startedAt)),
      h("td", {}, when(child.completedAt)),
      h("td", {}, h("button", {type: "button", class: "small", "aria-label": `Inspect ${child.id}`,
        onclick: async () => {
          const item = {id: child.id, createdAt: child.startedAt ? Date.parse(child.startedAt) : batch.createdAt};
          replace(inspector, await jobDetail(id, poolCall, item, ctx.signal));
          inspector.scrollIntoView({block: "nearest"});
        }}, "Inspect"))));
    const last = offset + page.requests.length;
    replace(detail,
      h("h2", {}, `Requests of ${batch.name || batch.id}`),
      h("div", {class: "table-wrap"}, h("table", {"aria-label": `Requests of ${batch.id}`},
        h("thead", {}, h("tr", {}, ["Request", "Status", "Started", "Completed", ""].map((t) => h("th", {}, t)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", {colspan: 5, class: "hint"}, "No requests."))))),
      h("div", {class: "row"},
        h("button", {type: "button", disabled: offset === 0,
          onclick: () => { opened.offset = Math.max(0, offset - PAGE); showRequests(); }}, "Previous"),
        h("span", {class: "hint"}, page.total ? `${offset + 1}–${last} of ${page.total}` : ""),
        h("button", {type: "button", disabled: !page.hasMore,
          onclick: () => { opened.offset = offset + PAGE; showRequests(); }}, "Next")),
      inspector);
  }

  replace(view,
    h("h2", {}, "Batches"),
    h("p", {class: "hint"}, "Batch Jobs run on this endpoint's batch pool, apart from /run traffic (docs/batch-jobs.md)."),
    message,
    h("div", {class: "table-wrap"}, h("table", {"aria-label": "Batches", class: "batches"},
      h("thead", {}, h("tr", {}, ["Batch", "Status", "Progress", "Created", ""].map((t) => h("th", {}, t)))),
      body)),
    detail);
  ctx.every(REFRESH_MS, refresh);
}
