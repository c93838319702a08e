// Worker log lines, shown the same way on the Logs page and for one job (Requests tab):
// `jobLogs(endpointId, jobId, {signal})` (contract B: GET /v1/endpoints/{id}/logs?job=…).
import {api} from "../api.js";
import {errorBox, h} from "../dom.js";

/** Load the log pages' stylesheet once (CSP: styles from our own origin only). */
export function useLogStyles() {
  if (document.getElementById("log-styles")) return;
  const href = new URL("./logs.css", import.meta.url).href;
  document.head.append(h("link", {id: "log-styles", rel: "stylesheet", href}));
}

/** The time of day of an ISO timestamp, with milliseconds ("00:50:00.123"). */
function clock(ts) {
  return (ts || "").slice(11, 23);
}

/** One log line: time, worker, job (its first characters), text (a leveled line's level and
 * message: the runpod SDK's JSON lines read as such, the raw line in its title); stderr
 * lines are marked.
 * `tag` "span" puts it inside a <pre>. */
export function lineElement(line, tag = "div") {
  const read = line.level && line.message !== line.line; // a logging line shows its level itself
  return h(tag, {class: `log-line ${line.stream}`},
    h("span", {class: "ts", title: `${line.ts} (${line.stream})`}, clock(line.ts)),
    h("span", {class: "who", title: line.worker}, line.worker),
    h("span", {class: "job", title: line.job ? `job ${line.job}` : "no job"}, line.job ? line.job.slice(0, 13) : ""),
    h("span", {class: "text", title: read ? line.line : null},
      read ? [h("span", {class: `level ${line.level}`}, line.level), line.message] : line.line));
}

/** The level a filter reads (the server's rule, manage/loglines.py `effective_level`): the
 * line's own, else ERROR on stderr and INFO on stdout. */
export const LEVELS = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];
export function effectiveLevel(line) {
  return line.level || (line.stream === "stderr" ? "ERROR" : "INFO");
}

/** An element showing the log lines of `jobId` (loaded once). */
export async function jobLogs(endpointId, jobId, {signal} = {}) {
  useLogStyles();
  const box = h("div", {class: "job-logs"}, h("h3", {}, "Worker log lines"));
  try {
    const path = `/v1/endpoints/${encodeURIComponent(endpointId)}/logs?job=${encodeURIComponent(jobId)}&tail=500`;
    const {lines} = await api(path, {signal});
    box.append(lines.length
      ? h("pre", {class: "log log-view", role: "log", "aria-label": `Log lines of job ${jobId}`, tabindex: "0"},
        lines.map((line) => lineElement(line, "span")))
      : h("p", {class: "hint"}, "No log lines for this job."));
    box.append(h("p", {class: "hint"},
      h("a", {href: `#/endpoints/${encodeURIComponent(endpointId)}/logs?job=${encodeURIComponent(jobId)}`}, "Follow this job's lines")));
  } catch (err) {
    if (err.name === "AbortError") throw err;
    box.append(errorBox(err));
  }
  return box;
}
