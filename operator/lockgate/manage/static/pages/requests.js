// The Requests tab: send a test request (Run = /runsync, Run async = /run then poll), watch it
// live (status, why it waits (/health's `waiting`), progress, stream, output, times, error
// read as lines (joberror.js) and the worker's log lines), and browse the endpoint's jobs
// (GET /requests, read again every LIST_REFRESH_MS while the tab is shown: filters, pages,
// cancel, retry, log lines, purge). Every call goes through api() to the endpoint's job API
// (jobApi(record)).
import {api, jobApi} from "../api.js";
import {duration, errorBox, h, replace, toast} from "../dom.js";
import {useStyles} from "./health.js";
import {errorView} from "./joberror.js";
import {jobLogs} from "./joblogs.js";
import {isLb, renderLbRequests} from "./lb.js";
import {workersFailing, workersTrouble} from "./state.js";

const STATES = ["IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"];
const FINAL = new Set(["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"]);
const DEFAULT_REQUEST = {input: {prompt: "Hello from the lockgate console"}};
const POLL_MS = 500;
const PAGE = 10;
// The list is read again this often while the tab is open (jobs sent from the runpod SDK or
// curl show by themselves), within GET /requests's limit of 10 calls per 10 s.
const LIST_REFRESH_MS = 3000;

const storageKey = (id) => `lockgate.request.${id}`;
const pause = (ms, signal) => new Promise((resolve, reject) => {
  const timer = setTimeout(resolve, ms);
  signal.addEventListener("abort", () => { clearTimeout(timer); reject(signal.reason); }, {once: true});
});

/** The class of a state's badge. */
function tone(status) {
  if (status === "COMPLETED") return "ok";
  if (status === "FAILED" || status === "TIMED_OUT") return "bad";
  if (status === "IN_PROGRESS") return "warn";
  return "muted";
}

function badge(status) {
  return h("span", {class: `badge ${tone(status)}`}, status);
}

/** The request body to send, or an Error saying why the text is not one. */
export function parseRequest(text) {
  let body;
  try {
    body = JSON.parse(text);
  } catch (err) {
    return new Error(`The test request is not valid JSON: ${err.message}. Nothing was sent.`);
  }
  if (!body || typeof body !== "object" || Array.isArray(body) || typeof body.input !== "object" || body.input === null || Array.isArray(body.input)) {
    return new Error('The test request must be a JSON object with an "input" object, e.g. {"input": {"prompt": "hi"}}. Nothing was sent.');
  }
  return body;
}

/** The text a stream chunk adds: text generation's `text` pieces, a string, else JSON. */
function chunkText(chunk) {
  const out = chunk?.output;
  if (typeof out === "string") return out;
  if (out && Array.isArray(out.text)) return out.text.join("");
  return `${JSON.stringify(out)}\n`;
}

export async function render(view, ctx) {
  useStyles(); // an opened job's facts are a dl.settings
  const id = ctx.params.id;
  const record = await api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal: ctx.signal});
  if (isLb(record)) return renderLbRequests(view, ctx, record); // no jobs: a request form
  const base = jobApi(record);
  const job = (path, opts = {}) => api(`${base}/${path}`, {signal: ctx.signal, ...opts});
  const list = requestsList(id, job, ctx);
  view.append(testRequest(id, job, ctx, () => list.refresh()), list.element);
  await list.refresh();
}

// --- the test request -------------------------------------------------------------------

function testRequest(id, job, ctx, onDone) {
  const saved = localStorage.getItem(storageKey(id));
  const textarea = h("textarea", {id: "test-request", rows: 8, spellcheck: "false", "aria-describedby": "test-request-help"});
  textarea.value = saved || JSON.stringify(DEFAULT_REQUEST, null, 2);
  textarea.addEventListener("input", () => localStorage.setItem(storageKey(id), textarea.value));
  const message = h("div", {"aria-live": "assertive"});
  const result = h("div", {class: "result", "aria-live": "polite"});
  let running = null;

  async function start(mode) {
    const body = parseRequest(textarea.value);
    if (body instanceof Error) {
      replace(message, errorBox(body));
      replace(result); // no earlier result under "Nothing was sent"
      return;
    }
    replace(message);
    localStorage.setItem(storageKey(id), textarea.value);
    running?.abort();
    running = new AbortController();
    const signal = AbortSignal.any([ctx.signal, running.signal]);
    const live = liveJob(id, job, signal, onDone);
    replace(result, live.element);
    for (const b of buttons) b.disabled = true;
    try {
      await live.run(mode, body);
    } catch (err) {
      if (err.name !== "AbortError") live.fail(err);
    } finally {
      for (const b of buttons) b.disabled = false;
      if (!ctx.signal.aborted) onDone();
    }
  }

  const buttons = [
    h("button", {type: "button", class: "primary", onclick: () => start("sync")}, "Run"),
    h("button", {type: "button", onclick: () => start("async")}, "Run async"),
  ];
  const reset = h("button", {type: "button", class: "link", onclick: () => {
    textarea.value = JSON.stringify(DEFAULT_REQUEST, null, 2);
    localStorage.removeItem(storageKey(id));
  }}, "Reset to the default");
  return h("div", {class: "card"},
    h("h2", {}, "Test request"),
    h("label", {for: "test-request"}, "Request body (JSON)"),
    textarea,
    h("p", {id: "test-request-help", class: "hint"},
      'A job request: {"input": {...}} (optionally "policy" and "webhook"). It is remembered in this browser for this endpoint. ',
      reset),
    message,
    h("div", {class: "row"}, buttons,
      h("span", {class: "hint"}, "Run waits for the result (/runsync); Run async queues it (/run) and follows it.")),
    result);
}

/** The live view of one job: status, cold-start note, stream, output, times, error, logs.
 * `onChange` runs once a Run async job is queued and when its status changes (the list
 * shows it at once, as the runner does). */
function liveJob(endpointId, job, signal, onChange) {
  const status = h("span", {}, badge("SENDING"));
  const note = h("div");
  const times = h("span", {class: "hint"});
  const jobId = h("span", {class: "mono"});
  const stream = h("pre", {class: "stream", hidden: true, "aria-label": "Stream"});
  const output = h("div");
  // shown only while the job can be cancelled (a `hidden` attribute loses to the
  // stylesheet's `button {display: inline-block}`, so it is put in and taken out)
  const cancelSlot = h("span");
  const cancel = h("button", {type: "button", class: "small danger", onclick: async () => {
    try {
      await job(`cancel/${cancel.dataset.job}`, {method: "POST"});
      toast("Cancel sent");
    } catch (err) {
      replace(note, errorBox(err));
    }
  }}, "Cancel");
  const element = h("div", {class: "card live-job"},
    h("div", {class: "row"}, h("strong", {}, "Status:"), status, jobId, times, cancelSlot),
    note, stream, output);
  let lastHealthCheck = 0;
  let current = "SENDING";

  // While the job runs, /status's `output` is its handler's latest progress_update report.
  function progress(body) {
    if (body.status !== "IN_PROGRESS" || body.output === undefined) return;
    const shown = typeof body.output === "string" ? body.output : JSON.stringify(body.output);
    replace(output, h("h3", {}, "Progress"), h("pre", {class: "output", "aria-label": "Progress"}, shown));
  }

  function show(state, body = {}) {
    if (state !== current && body.id && current !== "SENDING") onChange(); // the list agrees
    current = state;
    replace(status, badge(state));
    if (body.id) {
      replace(jobId, body.id);
      cancel.dataset.job = body.id;
    }
    replace(cancelSlot, cancel.dataset.job && !FINAL.has(state) ? cancel : null);
    if (body.delayTime !== undefined) {
      replace(times, `delay ${duration(body.delayTime)} · execution ${duration(body.executionTime)}`);
    }
  }

  async function coldStart(state) {
    if (state !== "IN_QUEUE") return replace(note);
    if (Date.now() - lastHealthCheck < 2000) return;
    lastHealthCheck = Date.now();
    const [health, record] = await Promise.all([
      job("health").catch(() => null),
      api(`/v1/endpoints/${encodeURIComponent(endpointId)}`, {signal, redirect: false}).catch(() => null),
    ]);
    if (current !== "IN_QUEUE") return; // it moved on meanwhile
    const trouble = workersTrouble(record, health);
    if (trouble) return replace(note, troubleNote(trouble, endpointId, record, health));
    replace(note, waitingNote(health));
  }

  async function finish(body) {
    show(body.status, body);
    replace(note);
    if (body.status === "COMPLETED") {
      replace(output, h("h3", {}, "Output"), h("pre", {class: "output", "aria-label": "Output"}, JSON.stringify(body.output, null, 2)));
    } else if (body.status === "FAILED" || body.status === "TIMED_OUT") {
      replace(output, errorView(body.error) || errorBox(new Error(body.status)));
      output.append(await jobLogs(endpointId, body.id, {signal}));
    }
  }

  async function follow(jobIdValue) {
    for (;;) {
      const read = await job(`stream/${encodeURIComponent(jobIdValue)}`);
      if (read.stream.length) {
        stream.hidden = false;
        stream.append(read.stream.map(chunkText).join(""));
      }
      await coldStart(read.status);
      // Held by the gateway until the job is final or POLL_MS passed (?wait=): the pause
      // between reads without a busy poll, and an ending shown as soon as it comes.
      const body = await job(`status/${encodeURIComponent(jobIdValue)}?wait=${POLL_MS}`, {signal});
      if (FINAL.has(body.status) && FINAL.has(read.status) && !read.stream.length) return finish(body);
      show(body.status, body);
      progress(body);
    }
  }

  async function run(mode, request) {
    if (mode === "async") {
      const queued = await job("run", {method: "POST", body: request});
      show(queued.status, queued);
      onChange();
      return follow(queued.id);
    }
    // /runsync answers once the job is final (or its wait elapsed): meanwhile, tell whether
    // workers are starting.
    show("IN_QUEUE");
    const answered = new AbortController();
    const waiting = AbortSignal.any([signal, answered.signal]);
    (async () => {
      for (;;) {
        await coldStart("IN_QUEUE");
        await pause(2000, waiting);
      }
    })().catch(() => {});
    let answer;
    try {
      answer = await job("runsync", {method: "POST", body: request, signal});
    } finally {
      answered.abort();
    }
    if (FINAL.has(answer.status)) return finish(answer);
    show(answer.status, answer);
    return follow(answer.id);
  }

  return {element, run, fail: (err) => replace(note, errorBox(err))};
}

/** Why the job waits, as /health's `waiting` says it ("max workers is 0: no worker will
 * start", "2 workers busy, max reached (2); 3 jobs in the queue", a cold start), or null
 * when nothing holds it back. */
function waitingNote(health) {
  if (!health?.waiting) return null;
  return h("div", {class: "warning waiting", role: "status"},
    h("strong", {}, "The job waits: "), `${health.waiting}.`);
}

/** "Workers are crashing: <why>" (or "cannot start"), with a link to the Logs tab: not a
 * cold start. */
function troubleNote(trouble, endpointId, record, health) {
  const failing = workersFailing(record);
  const unhealthy = health?.workers?.unhealthy || 0;
  const why = failing?.message || `${unhealthy} worker${unhealthy === 1 ? "" : "s"} unhealthy.`;
  return h("div", {class: "error crashing", role: "alert"},
    h("strong", {}, `${trouble}: `), why, " The job waits in the queue until a worker is ready. ",
    h("a", {href: `#/endpoints/${encodeURIComponent(endpointId)}/logs`}, "See the worker logs"));
}

// --- the list of requests ---------------------------------------------------------------

function requestsList(endpointId, job, ctx) {
  const status = h("select", {id: "filter-status"},
    h("option", {value: ""}, "All states"), STATES.map((s) => h("option", {value: s}, s)));
  const from = h("input", {id: "filter-from", type: "datetime-local"});
  const to = h("input", {id: "filter-to", type: "datetime-local"});
  const body = h("tbody");
  const message = h("div", {"aria-live": "polite"});
  const cursors = [null]; // the cursor of each page read so far; the last is the one shown
  let next = null;
  let retrying = null;
  const newer = h("button", {type: "button", onclick: () => { cursors.pop(); refresh(); }}, "Newer");
  const older = h("button", {type: "button", onclick: () => { cursors.push(next); refresh(); }}, "Older");
  const pageInfo = h("span", {class: "hint"});

  let applied = {status: "", from: "", to: ""}; // the filters as last applied
  let shownPage = null; // the answer shown, as JSON: an unchanged one is not drawn again

  function query() {
    const q = new URLSearchParams({limit: String(PAGE)});
    if (applied.status) q.set("status", applied.status);
    if (applied.from) q.set("from", new Date(applied.from).toISOString());
    if (applied.to) q.set("to", new Date(applied.to).toISOString());
    const cursor = cursors[cursors.length - 1];
    if (cursor) q.set("cursor", cursor);
    return q;
  }

  async function act(path, done) {
    try {
      await job(path, {method: "POST"});
      toast(done);
      await refresh();
    } catch (err) {
      if (err.name !== "AbortError") replace(message, errorBox(err));
    }
  }

  function row(item) {
    const detailRow = h("tr", {class: "job-detail-row", hidden: true}, h("td", {colspan: 7}));
    const open = h("button", {type: "button", class: "small", "aria-expanded": "false", "aria-label": `Open ${item.id}`, onclick: async () => {
      const opening = detailRow.hidden;
      detailRow.hidden = !opening;
      open.setAttribute("aria-expanded", String(opening));
      if (opening) replace(detailRow.firstChild, await jobDetail(endpointId, job, item, ctx.signal));
    }}, "Open");
    const logsRow = h("tr", {class: "job-logs-row", hidden: true}, h("td", {colspan: 7}));
    const logs = h("button", {type: "button", class: "small", "aria-expanded": "false", "aria-label": `Log lines of ${item.id}`, onclick: async () => {
      const open = logsRow.hidden;
      logsRow.hidden = !open;
      logs.setAttribute("aria-expanded", String(open));
      if (open && !logsRow.dataset.loaded) {
        logsRow.dataset.loaded = "1";
        replace(logsRow.firstChild, await jobLogs(endpointId, item.id, {signal: ctx.signal}));
      }
    }}, "Logs");
    const actions = [open, logs];
    if (item.status === "IN_QUEUE" || item.status === "IN_PROGRESS") {
      actions.unshift(h("button", {type: "button", class: "small danger", "aria-label": `Cancel ${item.id}`,
        onclick: () => act(`cancel/${encodeURIComponent(item.id)}`, "Cancelled")}, "Cancel"));
    }
    if (item.status === "FAILED" || item.status === "TIMED_OUT") {
      actions.unshift(h("button", {type: "button", class: "small", "aria-label": `Retry ${item.id}`,
        onclick: () => act(`retry/${encodeURIComponent(item.id)}`, "Queued again")}, "Retry"));
    }
    return [
      h("tr", {dataset: {job: item.id}},
        h("td", {}, new Date(item.createdAt).toLocaleString()),
        h("td", {class: "mono"}, h("button", {type: "button", class: "link mono", onclick: () => open.click()}, item.id)),
        h("td", {}, badge(item.status), errorView(item.error, {compact: true})),
        h("td", {}, duration(item.delayTime)),
        h("td", {}, duration(item.executionTime)),
        h("td", {class: "mono"}, item.workerId || "—"),
        h("td", {}, h("div", {class: "row"}, actions))),
      detailRow,
      logsRow,
    ];
  }

  async function refresh({live = false} = {}) {
    try {
      const asked = query().toString();
      const page = await job(`requests?${asked}`);
      if (live && asked !== query().toString()) return; // the person paged or filtered meanwhile
      next = page.nextCursor;
      replace(message);
      const seen = JSON.stringify([asked, page]);
      if (live && seen === shownPage) return;
      shownPage = seen;
      replace(body, page.items.length
        ? page.items.map(row)
        : h("tr", {}, h("td", {colspan: 7, class: "hint"}, "No requests match.")));
      newer.disabled = cursors.length <= 1;
      older.disabled = !next;
      replace(pageInfo, `Page ${cursors.length}`);
    } catch (err) {
      if (err.name === "AbortError") return;
      replace(message, errorBox(err));
      if (err.status === 429 && !retrying) {
        // the listing is limited to 10 calls per 10 s: try again once the window moves on
        retrying = setTimeout(() => { retrying = null; refresh(); }, 2500);
        ctx.signal.addEventListener("abort", () => clearTimeout(retrying), {once: true});
      }
    }
  }

  const apply = (event) => {
    event.preventDefault();
    applied = {status: status.value, from: from.value, to: to.value};
    cursors.splice(1);
    refresh();
  };

  // Live: the first page is read again every LIST_REFRESH_MS while the tab is shown, unless
  // the person reads an older page or has a job's details or log lines open (a new drawing
  // would close them), or the tab is in the background.
  const liveNote = h("span", {class: "hint live-note"}, "Updated every few seconds");
  (async () => {
    for (;;) {
      await pause(LIST_REFRESH_MS, ctx.signal);
      const reading = cursors.length > 1
        || body.querySelector("tr.job-detail-row:not([hidden]), tr.job-logs-row:not([hidden])");
      liveNote.textContent = reading ? "Live updates paused while a job is open or an older page is shown" : "Updated every few seconds";
      if (reading || document.hidden || retrying) continue;
      await refresh({live: true});
    }
  })().catch(() => {}); // ends when the tab closes (ctx.signal)
  const filters = h("form", {class: "row filters", onsubmit: apply},
    h("div", {}, h("label", {for: "filter-status"}, "Status"), status),
    h("div", {}, h("label", {for: "filter-from"}, "Created from"), from),
    h("div", {}, h("label", {for: "filter-to"}, "Created before"), to),
    h("button", {type: "submit", class: "apply"}, "Apply filters"));
  const element = h("div", {class: "card"},
    h("div", {class: "row"}, h("h2", {class: "grow"}, "Requests"), liveNote,
      h("button", {type: "button", onclick: () => refresh()}, "Refresh"),
      purgeButton(job, refresh)),
    filters,
    message,
    h("div", {class: "table-wrap"}, h("table", {"aria-label": "Requests"},
      h("thead", {}, h("tr", {}, ["Created", "ID", "Status", "Delay", "Execution", "Worker", "Actions"].map((t) => h("th", {scope: "col"}, t)))),
      body)),
    h("div", {class: "row pager"}, newer, older, pageInfo),
    h("p", {class: "hint retention"}, RETENTION));
  return {element, refresh};
}

const RETENTION = "A job is listed while its record lives: a Run (/runsync) job for 1 minute after it "
  + "finishes, a Run async (/run) job for 30 minutes, never beyond its ttl (default 24 h). "
  + "Open a job to see its input and output while it is listed.";

const STREAM_GONE = "None kept: the handler streamed none, or a /stream read took them "
  + "(/stream hands each chunk out once; the test runner's Stream reads them).";

/** "1", or "3 (its worker was lost 2 times: the job went back to the queue)". */
function attemptsText(n) {
  if (n === undefined) return "—";
  if (n <= 1) return String(n);
  const lost = n - 1;
  return `${n} (its worker was lost ${lost} time${lost === 1 ? "" : "s"}: the job went back to the queue)`;
}

const ENDED = {
  COMPLETED: "completed",
  FAILED: "failed: the handler's error",
  TIMED_OUT: "timed out: past its execution timeout",
  CANCELLED: "cancelled",
  WORKER_LOST: "worker lost: the job went back to the queue",
  GIVEN_BACK: "given back unrun: its worker was told to stop first",
};

/** How one take of the job ended, in words; `last`: the newest take, `status` and `error`
 * the job's (its endpoint's onWorkerLost policy says so in the error, docs/lost-workers.md). */
export function attemptEnd(attempt, last, status, error) {
  if (!attempt.ended) return last && status === "IN_PROGRESS" ? "running" : "—";
  if (attempt.ended === "WORKER_LOST" && last && status === "FAILED") {
    return String(error || "").includes("(onWorkerLost")
      ? "worker lost: the job failed, not run again (the endpoint's onWorkerLost)"
      : "worker lost: out of attempts, the job failed";
  }
  return ENDED[attempt.ended] || attempt.ended;
}

/** The job's last takes (`attemptHistory`, oldest first): worker, when, for how long, how
 * each ended. */
function attemptList(body, id) {
  const history = body.attemptHistory || [];
  if (!history.length) return h("p", {class: "hint"}, "Not taken by a worker yet.");
  const clock = (ms) => new Date(ms).toLocaleTimeString();
  return h("ol", {class: "attempts", "aria-label": `Attempts of ${id}`}, history.map((a, i) =>
    h("li", {},
      h("code", {}, a.workerId), ` · taken ${clock(a.takenAt)}`,
      a.endedAt ? ` · ${duration(a.endedAt - a.takenAt)}` : "",
      ` · ${attemptEnd(a, i === history.length - 1, body.status, body.error)}`)));
}

/** One job opened: input (GET /status/{id}?input=1), attempts and unread stream chunks
 * (&details=1), output or error, times, worker, log lines. */
export async function jobDetail(endpointId, job, item, signal) {
  let body;
  try {
    body = await job(`status/${encodeURIComponent(item.id)}?input=1&details=1`);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    return errorBox(err.status === 404 ? new Error(`Job ${item.id} is no longer kept (its retention or ttl ended).`) : err);
  }
  const json = (value) => JSON.stringify(value, null, 2);
  const facts = [
    ["Status", badge(body.status)],
    ["Created", new Date(item.createdAt).toLocaleString()],
    ["Delay", duration(body.delayTime)],
    ["Execution", duration(body.executionTime)],
    ["Worker", item.workerId || "—"],
    ["Attempts", attemptsText(body.attempts)],
  ];
  return h("section", {class: "job-detail", "aria-label": `Job ${item.id}`},
    h("dl", {class: "settings"}, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h3", {}, "Attempts"),
    attemptList(body, item.id),
    h("h3", {}, "Input"),
    body.input === undefined
      ? h("p", {class: "hint"}, "Not kept.")
      : h("pre", {class: "output", "aria-label": `Input of ${item.id}`}, json(body.input)),
    body.error
      ? [h("h3", {}, "Error"), errorView(body.error)]
      : [h("h3", {}, "Output"), body.output === undefined
        ? h("p", {class: "hint"}, FINAL.has(body.status) ? "No output." : "Not finished yet.")
        : h("pre", {class: "output", "aria-label": `Output of ${item.id}`}, json(body.output))],
    h("h3", {}, "Stream chunks"),
    body.stream?.length
      ? h("pre", {class: "output", "aria-label": `Stream chunks of ${item.id}`},
        body.stream.map((chunk) => JSON.stringify(chunk)).join("\n")) // one chunk a line
      : h("p", {class: "hint"}, STREAM_GONE),
    await jobLogs(endpointId, item.id, {signal})); // headed "Worker log lines"
}

/** "Purge queue" with a confirmation dialog; POST /purge-queue on confirm. */
function purgeButton(job, refresh) {
  const dialog = h("dialog", {"aria-labelledby": "purge-title"},
    h("h2", {id: "purge-title"}, "Purge the queue?"),
    h("p", {}, "Every queued job of this endpoint is removed for good. Running jobs go on."),
    h("form", {method: "dialog", class: "row"},
      h("button", {type: "submit", value: "cancel"}, "Keep the queue"),
      h("button", {type: "submit", value: "purge", class: "danger"}, "Purge queued jobs")));
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "purge") return;
    try {
      const {removed} = await job("purge-queue", {method: "POST"});
      toast(`Purged ${removed} queued job${removed === 1 ? "" : "s"}`);
      await refresh();
    } catch (err) {
      if (err.name !== "AbortError") toast(err.message);
    }
  });
  const open = h("button", {type: "button", class: "danger", onclick: () => { dialog.returnValue = ""; dialog.showModal(); }}, "Purge queue");
  return [open, dialog];
}
