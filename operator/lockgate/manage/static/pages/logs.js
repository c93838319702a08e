// The Logs page: a live tail of the endpoint's worker log lines
// (GET /v1/endpoints/{id}/logs?follow=true, Server-Sent Events through api.js `events`),
// a worker filter, pause/resume, and auto-scroll that stops when the person scrolls up.
import {events} from "../api.js";
import {errorBox, h, replace} from "../dom.js";
import {lineElement, useLogStyles} from "./joblogs.js";

const KEEP = 5000; // lines kept in the page (the server keeps more)
const TAIL = 500; // lines asked for when the tail opens
const RETRY_MS = 3000; // a broken stream is opened again after this long
const NEAR_BOTTOM_PX = 40; // closer than this to the bottom counts as "at the bottom"

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
  const pause = h("button", {type: "button", "aria-pressed": "false"}, "Pause");
  const state = h("span", {class: "logs-state", role: "status", "aria-live": "polite"}, "Connecting…");
  const box = h("div", {class: "log-view", role: "log", "aria-label": "Worker log lines", tabindex: "0"});
  const jump = h("button", {type: "button", class: "small log-jump", hidden: true}, "Jump to latest");
  const problem = h("div");

  const shown = (line) => !picker.value || line.worker === picker.value;
  const atBottom = () => box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX;
  const toBottom = () => { box.scrollTop = box.scrollHeight; };

  function redraw() {
    const visible = lines.filter(shown);
    replace(box, visible.length ? visible.map((line) => lineElement(line))
      : h("div", {class: "log-empty"}, paused ? "Paused." : "No log lines yet: they appear here as workers write them."));
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
      h("label", {for: "log-worker"}, "Worker"), picker, pause, state),
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
