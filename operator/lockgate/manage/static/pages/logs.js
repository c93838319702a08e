// The Logs page: a live tail of the endpoint's worker log lines
// (GET /v1/endpoints/{id}/logs?follow=true, Server-Sent Events through api.js `events`),
// filters by worker, text and level (the lines kept in the page), pause/resume, auto-scroll
// that stops when the person scrolls up, and a download of a time range's lines as a file
// (GET …/logs?since=&until=&q=&level=&worker=&job=&tail=5000, saved from the browser).
import {api, events} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";
import {effectiveLevel, LEVELS, lineElement, useLogStyles} from "./joblogs.js";

const KEEP = 5000; // lines kept in the page (the server keeps more)
const TAIL = 500; // lines asked for when the tail opens
const RETRY_MS = 3000; // a broken stream is opened again after this long
const NEAR_BOTTOM_PX = 40; // closer than this to the bottom counts as "at the bottom"
const DOWNLOAD_MAX = 5000; // lines a download asks for (the API's largest tail)
const DEFAULT_RANGE_MS = 3_600_000; // a download's range starts this long before now

/** A Date as a datetime-local input's value (local time, to the millisecond). */
function localInput(date) {
  const shifted = new Date(date.getTime() - date.getTimezoneOffset() * 60_000);
  return shifted.toISOString().slice(0, 23);
}

/** One line of a downloaded file: time, worker, stream, [job,] the line as written. */
export function fileLine(line) {
  return [line.ts, line.worker, line.stream, line.job || "-", line.line].join(" ");
}

export async function render(view, ctx) {
  useLogStyles();
  const id = ctx.params.id;
  const job = ctx.query.get("job");
  const lines = []; // every line received, oldest first (at most KEEP)
  const workers = new Set();
  let paused = false;
  let stick = true; // follow the newest line while the person has not scrolled up
  let held = 0; // lines received while paused
  let lastTs = null;

  const picker = h("select", {id: "log-worker", name: "worker"}, h("option", {value: ""}, "All workers"));
  const search = h("input", {id: "log-search", type: "search", name: "q", placeholder: "text in the line",
    autocomplete: "off", spellcheck: "false"});
  const level = h("select", {id: "log-level", name: "level"}, h("option", {value: ""}, "Any level"),
    LEVELS.slice(1).map((l) => h("option", {value: l}, l === "ERROR" ? "ERROR" : `${l} and above`)));
  const from = h("input", {id: "log-from", type: "datetime-local", step: "0.001"});
  const to = h("input", {id: "log-to", type: "datetime-local", step: "0.001"});
  const download = h("button", {type: "button"}, "Download");
  const pause = h("button", {type: "button", "aria-pressed": "false"}, "Pause");
  const state = h("span", {class: "logs-state", role: "status", "aria-live": "polite"}, "Connecting…");
  const box = h("div", {class: "log-view", role: "log", "aria-label": "Worker log lines", tabindex: "0"});
  const jump = h("button", {type: "button", class: "small log-jump", hidden: true}, "Jump to latest");
  const problem = h("div");

  const shown = (line) => (!picker.value || line.worker === picker.value)
    && (!search.value || line.line.toLowerCase().includes(search.value.toLowerCase()))
    && (!level.value || LEVELS.indexOf(effectiveLevel(line)) >= LEVELS.indexOf(level.value));
  const atBottom = () => box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX;
  const toBottom = () => { box.scrollTop = box.scrollHeight; };

  function redraw() {
    const visible = lines.filter(shown);
    replace(box, visible.length ? visible.map((line) => lineElement(line))
      : h("div", {class: "log-empty"}, paused ? "Paused."
        : lines.length ? "No line matches the filters."
        : "No log lines yet: they appear here as workers write them."));
    if (stick) toBottom();
  }

  function setState(text, kind = "") {
    state.textContent = text;
    state.className = `logs-state ${kind}`;
  }

  function add(line) {
    lines.push(line);
    if (lines.length > KEEP) lines.splice(0, lines.length - KEEP);
    lastTs = line.ts;
    if (!workers.has(line.worker)) {
      workers.add(line.worker);
      picker.append(h("option", {value: line.worker}, line.worker));
    }
    if (paused) {
      held += 1;
      setState(`Paused: ${held} new line${held === 1 ? "" : "s"} waiting`);
      return;
    }
    if (!shown(line)) return;
    box.querySelector(".log-empty")?.remove();
    box.append(lineElement(line));
    while (box.childElementCount > KEEP) box.firstElementChild.remove();
    if (stick) toBottom();
  }

  function note(text) {
    box.append(h("div", {class: "log-note"}, text));
  }

  picker.addEventListener("change", redraw);
  search.addEventListener("input", redraw);
  level.addEventListener("change", redraw);
  const now = new Date();
  from.value = localInput(new Date(now.getTime() - DEFAULT_RANGE_MS));
  to.value = localInput(now);
  let toChosen = false; // untouched, "to" is the moment of the click
  to.addEventListener("input", () => { toChosen = true; });
  download.addEventListener("click", async () => {
    download.disabled = true;
    try {
      if (!toChosen) to.value = localInput(new Date());
      const start = new Date(from.value), end = new Date(to.value);
      if (Number.isNaN(start.getTime()) || Number.isNaN(end.getTime()) || start >= end) {
        throw new Error("Choose a range whose start is before its end.");
      }
      const params = new URLSearchParams({since: start.toISOString(), until: end.toISOString(),
        tail: String(DOWNLOAD_MAX)});
      for (const [name, value] of [["worker", picker.value], ["job", job], ["q", search.value], ["level", level.value]]) {
        if (value) params.set(name, value);
      }
      const {lines} = await api(`/v1/endpoints/${encodeURIComponent(id)}/logs?${params}`, {signal: ctx.signal});
      const text = lines.map(fileLine).join("\n") + (lines.length ? "\n" : "");
      const url = URL.createObjectURL(new Blob([text], {type: "text/plain"}));
      const stamp = (d) => d.toISOString().replace(/[:.]/g, "-").slice(0, 19);
      const a = h("a", {href: url, download: `${id}-logs-${stamp(start)}-${stamp(end)}.log`, hidden: true});
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      replace(problem);
      toast(lines.length >= DOWNLOAD_MAX
        ? `The range holds more: the file has its newest ${DOWNLOAD_MAX} lines`
        : `${lines.length} line${lines.length === 1 ? "" : "s"} saved`);
    } catch (err) {
      if (err.name !== "AbortError") replace(problem, errorBox(err));
    } finally {
      download.disabled = false;
    }
  });
  pause.addEventListener("click", () => {
    paused = !paused;
    pause.textContent = paused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", String(paused));
    if (paused) {
      held = 0;
      setState("Paused");
    } else {
      setState("Live", "live");
      redraw();
    }
  });
  box.addEventListener("scroll", () => {
    stick = atBottom();
    jump.hidden = stick;
  });
  jump.addEventListener("click", () => {
    stick = true;
    jump.hidden = true;
    toBottom();
  });

  replace(view,
    h("div", {class: "row logs-bar"},
      h("label", {for: "log-worker"}, "Worker"), picker,
      h("label", {for: "log-search"}, "Search"), search,
      h("label", {for: "log-level"}, "Level"), level, pause, state),
    h("div", {class: "row logs-download"},
      h("span", {class: "hint"}, "Download the lines of a time range (with the filters above):"),
      h("label", {for: "log-from"}, "From"), from, h("label", {for: "log-to"}, "to"), to, download),
    job ? h("p", {class: "hint"}, "Lines of job ", h("code", {}, job), " only. ",
      h("a", {href: `#/endpoints/${encodeURIComponent(id)}/logs`}, "All lines")) : null,
    problem, box, jump);
  redraw();

  async function follow() {
    while (!ctx.signal.aborted) {
      const params = new URLSearchParams({follow: "true", tail: String(TAIL)});
      if (lastTs) params.set("since", lastTs);
      if (job) params.set("job", job);
      try {
        setState("Connecting…");
        const opened = events(`/v1/endpoints/${encodeURIComponent(id)}/logs?${params}`, ({event, data}) => {
          if (event === "dropped") note(`${data.dropped} line(s) skipped: ${data.why}`);
          else add(data);
        }, {signal: ctx.signal});
        if (!paused) setState("Live", "live");
        replace(problem);
        await opened;
      } catch (err) {
        if (err.name === "AbortError") return;
        replace(problem, errorBox(err));
        if (err.status && err.status < 500) return setState("Stopped", "bad");
      }
      if (ctx.signal.aborted) return;
      setState("Reconnecting…", "bad");
      await new Promise((done) => setTimeout(done, RETRY_MS));
    }
  }
  follow();
}
