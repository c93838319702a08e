// One job's worker log lines (GET /v1/endpoints/{id}/logs?job=…), for the Requests tab.
import {api} from "../api.js";
import {errorBox, h} from "../dom.js";

/** An element showing the log lines of `jobId` (loaded once). */
export async function jobLogs(endpointId, jobId, {signal} = {}) {
  const box = h("div", {class: "job-logs"}, h("h3", {}, "Worker log lines"));
  try {
    const path = `/v1/endpoints/${encodeURIComponent(endpointId)}/logs?job=${encodeURIComponent(jobId)}&tail=500`;
    const {lines} = await api(path, {signal});
    box.append(lines.length
      ? h("pre", {class: "log"}, lines.map((l) => `${l.ts} ${l.worker} ${l.line}\n`))
      : h("p", {class: "hint"}, "No log lines for this job."));
  } catch (err) {
    if (err.name === "AbortError") throw err;
    box.append(errorBox(err));
  }
  return box;
}
