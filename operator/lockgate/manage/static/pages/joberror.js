// A failed job's `error` as a person reads it, by the rules of models/joberror.py (the CLI's
// reader; tests/test_job_error_js.py runs both on the same errors): the runpod SDK's JSON
// string (error_type, error_message, error_traceback), its generator form ("handler: …\n
// traceback: …"), lockgate's own ("WORKER_LOST: …") or any text, read as one line and a
// traceback. `errorView` shows it: the line, the traceback folded under it.
import {h} from "../dom.js";

const CLASS_RE = /^<class '(?:[\w.]*\.)?(\w+)'>$/; // str(type(err)): "<class 'x.ValueError'>"
const GENERATOR_RE = /^handler: ([\s\S]*?) ?\ntraceback: ([\s\S]*)$/;

const text = (value) => (value === null || value === undefined ? "" : String(value));

function kind(errorType) {
  const name = text(errorType || "").trim();
  const found = CLASS_RE.exec(name);
  return found ? found[1] : name;
}

/** {kind, message, traceback} of a job's error, or null when it has none. */
export function readError(error) {
  if (error === null || error === undefined || error === "") return null;
  let data = error;
  if (typeof error === "string" && error.trimStart().startsWith("{")) {
    try {
      data = JSON.parse(error);
    } catch {
      data = error;
    }
  }
  if (data && typeof data === "object" && !Array.isArray(data)) {
    const message = "error_message" in data ? data.error_message
      : "message" in data ? data.message : data.error;
    if (message !== null && message !== undefined) {
      return {kind: kind(data.error_type), message: text(message), traceback: text(data.error_traceback || "").trimEnd()};
    }
    return {kind: "", message: JSON.stringify(data), traceback: ""};
  }
  const whole = text(data);
  const generator = GENERATOR_RE.exec(whole);
  if (generator) return {kind: "", message: generator[1], traceback: generator[2].trimEnd()};
  const cut = whole.indexOf("\n");
  const [first, rest] = cut < 0 ? [whole, ""] : [whole.slice(0, cut), whole.slice(cut + 1)];
  const traceback = rest.trimStart().startsWith("Traceback") ? rest.trimEnd() : "";
  return traceback ? {kind: "", message: first, traceback} : {kind: "", message: whole, traceback: ""};
}

/** One line: "ValueError: bad input" (the message's whitespace runs made one space). */
export function errorLine(read) {
  const message = read.message.split(/\s+/).filter(Boolean).join(" ");
  return read.kind ? `${read.kind}: ${message}` : message;
}

/** A job's error shown: its line in an alert box, the traceback folded under it (a
 * <details> that opens on a click); `compact` for a table cell (a hint, not a box). */
export function errorView(error, {compact = false} = {}) {
  const read = readError(error);
  if (!read) return null;
  const folded = read.traceback
    ? h("details", {class: "traceback"}, h("summary", {}, "Traceback"), h("pre", {class: "log"}, read.traceback))
    : null;
  return h("div", compact ? {class: "hint job-error"} : {class: "error job-error", role: "alert"},
    h("div", {class: "job-error-line"}, errorLine(read)), folded);
}
