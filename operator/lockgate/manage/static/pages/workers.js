// The Workers tab: one row per worker (GET /v2/serverless/{id}/workers, refreshed every 2 s)
// with its state, version (or stale), uptime, the job it runs (the job API's
// GET /requests?status=IN_PROGRESS: each job's workerId), GPU and node; its log
// (GET …/workers/{workerId}/logs, Server-Sent Events) under the table; Stop and Restart
// (POST …/workers/{workerId}/stop|restart) after a confirmation dialog.
import {api, events, jobApi} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";
import {useLogStyles} from "./joblogs.js";

const REFRESH_MS = 2000;
const LOG_TAIL = 200; // lines of a worker's log shown when it opens
const KEEP = 2000; // lines kept in the log panel
const TONE = {RUNNING: "ok", IDLE: "ok", INITIALIZING: "muted", THROTTLED: "warn", UNHEALTHY: "bad"};

/** "1 h 2 min", "3 min 4 s", "12 s" from seconds. */
export function uptime(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const h_ = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  if (h_) return `${h_} h ${m} min`;
  if (m) return `${m} min ${s} s`;
  return `${s} s`;
}

/** Worker id → the ids of the jobs it holds, from a page of IN_PROGRESS jobs. */
function jobsByWorker(items) {
  const out = {};
  for (const job of items || []) {
    if (job.workerId) (out[job.workerId] ??= []).push(job.id);
  }
  return out;
}

const ACTIONS = {
  stop: {
    title: "Stop worker",
    button: "Stop worker",
    says: "It takes no new job; the job in hand finishes, then it exits. Another worker starts "
      + "only if the endpoint's minimum workers or its queue want one.",
    done: "is stopping",
  },
  restart: {
    title: "Restart worker",
    button: "Restart worker",
    says: "A fresh worker of the endpoint's current version starts now. This one takes no new "
      + "job; the job in hand finishes, then it exits.",
    done: "is restarting: a fresh worker starts",
  },
};

export async function render(view, ctx) {
  useLogStyles();
  const id = ctx.params.id;
  const base = `/v2/serverless/${encodeURIComponent(id)}/workers`;
  const record = await api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal: ctx.signal});
  const status = h("div", {"aria-live": "polite"});
  const summary = h("p", {class: "hint workers-summary", role: "status"}, "Loading…");
  const table = h("div", {class: "table-wrap"});
  const logPanel = h("section", {class: "card worker-log", hidden: true, "aria-labelledby": "worker-log-title"});
  let following = null; // {id, controller}

  // the confirmation, as RunPod's: what happens, then Cancel or the action
  let chosen = null;
  const title = h("h2", {id: "worker-action-title"});
  const question = h("p", {});
  const confirmButton = h("button", {type: "submit", value: "confirm", class: "danger"});
  const dialog = h("dialog", {"aria-labelledby": "worker-action-title"},
    title, question,
    h("form", {method: "dialog", class: "row"},
      h("button", {type: "submit", value: "cancel"}, "Cancel"), confirmButton));
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "confirm" || !chosen) return;
    const {worker, action} = chosen;
    try {
      await api(`${base}/${encodeURIComponent(worker.id)}/${action}`, {method: "POST"});
      replace(status);
      toast(`Worker ${worker.id} ${ACTIONS[action].done}`);
      await refresh();
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
    }
  });
  function ask(worker, action, jobs) {
    chosen = {worker, action};
    const a = ACTIONS[action];
    title.textContent = `${a.title} ${worker.id}?`;
    replace(question, a.says, jobs.length ? ` It holds job ${jobs.join(", ")} now.` : "");
    confirmButton.textContent = a.button;
    dialog.returnValue = "";
    dialog.showModal();
  }

  function showLog(worker) {
    if (following) following.controller.abort();
    const controller = new AbortController();
    ctx.signal.addEventListener("abort", () => controller.abort());
    following = {id: worker.id, controller};
    const box = h("div", {class: "log-view", role: "log", "aria-label": `Log of worker ${worker.id}`, tabindex: "0"},
      h("div", {class: "log-empty"}, "No log lines yet."));
    const state = h("span", {class: "logs-state", role: "status"}, "Connecting…");
    replace(logPanel,
      h("div", {class: "row"}, h("h2", {id: "worker-log-title", class: "grow"}, `Log of ${worker.id}`), state,
        h("a", {href: `#/endpoints/${encodeURIComponent(id)}/logs`}, "All logs"),
        h("button", {type: "button", class: "small", onclick: () => {
          controller.abort();
          following = null;
          logPanel.hidden = true;
          refresh();
        }}, "Close")),
      box);
    logPanel.hidden = false;
    let count = 0;
    events(`${base}/${encodeURIComponent(worker.id)}/logs?tail=${LOG_TAIL}`, ({data}) => {
      if (!data || typeof data !== "object") return;
      if (!count) box.replaceChildren();
      count += 1;
      const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
      box.append(h("div", {class: `log-line worker-line ${data.source}`},
        h("span", {class: "ts", title: data.ts}, (data.ts || "").slice(11, 23)),
        h("span", {class: "who"}, data.source),
        h("span", {class: "text"}, data.line)));
      while (box.childElementCount > KEEP) box.firstElementChild.remove();
      if (stick) box.scrollTop = box.scrollHeight;
      state.textContent = "Live";
      state.className = "logs-state live";
    }, {signal: controller.signal}).then(() => {
      state.textContent = "Ended: the worker is gone";
      state.className = "logs-state";
    }).catch((err) => {
      if (err.name === "AbortError") return;
      state.textContent = "Stopped";
      state.className = "logs-state bad";
      logPanel.append(errorBox(err));
    });
    refresh();
  }

  function row(worker, jobs) {
    const stale = worker.isStale ? h("span", {class: "badge warn"}, "stale") : null;
    const gpu = worker.gpuCount ? `${worker.gpuCount} × ${worker.gpuTypeId || "GPU"}` : "none";
    return h("tr", {dataset: {worker: worker.id}},
      h("td", {class: "mono"}, worker.id),
      h("td", {}, h("span", {class: `badge ${TONE[worker.status] || "muted"}`}, worker.status),
        worker.unhealthyReason ? h("div", {class: "hint"}, worker.unhealthyReason) : null),
      h("td", {}, worker.version === null ? "—" : `v${worker.version}`, " ", stale),
      h("td", {}, uptime(worker.uptimeSeconds)),
      h("td", {class: "mono"}, jobs.length
        ? jobs.map((j) => h("a", {href: `#/endpoints/${encodeURIComponent(id)}/logs?job=${encodeURIComponent(j)}`, title: `job ${j}: its log lines`}, j))
        : "—"),
      h("td", {}, gpu),
      h("td", {}, worker.nodeName || "—", worker.dataCenterId ? h("div", {class: "hint"}, worker.dataCenterId) : null),
      h("td", {}, h("div", {class: "row"},
        h("button", {type: "button", class: "small", "aria-label": `Log of ${worker.id}`,
          "aria-pressed": String(following?.id === worker.id), onclick: () => showLog(worker)}, "Log"),
        h("button", {type: "button", class: "small", "aria-label": `Restart ${worker.id}`,
          onclick: () => ask(worker, "restart", jobs)}, "Restart"),
        h("button", {type: "button", class: "small danger", "aria-label": `Stop ${worker.id}`,
          onclick: () => ask(worker, "stop", jobs)}, "Stop"))));
  }

  async function runningJobs() {
    try {
      const page = await api(`${jobApi(record)}/requests?status=IN_PROGRESS&limit=100`,
        {signal: ctx.signal, redirect: false});
      return jobsByWorker(page.items);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      return {}; // a load-balancing endpoint has no job list: its requests are not named
    }
  }

  async function refresh() {
    const [body, jobs] = await Promise.all([api(base, {signal: ctx.signal}), runningJobs()]);
    const s = body.summary;
    summary.textContent = s.total
      ? `${s.total} worker${s.total === 1 ? "" : "s"}: ${s.running} running, ${s.idle} idle, `
        + `${s.initializing} initializing, ${s.throttled} throttled, ${s.unhealthy} unhealthy · `
        + `endpoint version ${body.endpointVersion ?? "—"}`
      : `No worker runs now (minimum ${record.workersMin}): one starts when a job comes.`;
    replace(table, body.workers.length ? h("table", {"aria-label": "Workers"},
      h("thead", {}, h("tr", {}, ["Worker", "State", "Version", "Uptime", "Job", "GPU", "Node", ""]
        .map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, body.workers.map((w) => row(w, jobs[w.id] || [])))) : null);
  }

  replace(view, status, summary, table, logPanel, dialog);
  ctx.every(REFRESH_MS, async () => {
    try {
      await refresh();
      replace(status);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(status, errorBox(err));
    }
  });
}
