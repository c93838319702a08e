// The console's only way to the server: the public REST APIs, with the admin key that the
// person signed in with. The key lives in sessionStorage (this tab only), never in a URL.

const KEY = "lockgate.key";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  sessionStorage.setItem(KEY, key);
}

export function signOut() {
  sessionStorage.removeItem(KEY);
  location.hash = "#/signin";
}

function headers(extra = {}) {
  return {authorization: `Bearer ${apiKey()}`, ...extra};
}

async function failure(response, redirect = true) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: keep the status line
  }
  // {"error"} of /v1; an RFC 9457 problem's `detail` under /v2
  const message = body?.error || body?.detail || `${response.status} ${response.statusText}`;
  if (response.status === 401 && redirect) {
    // a wrong, revoked or expired key: back to the sign-in page, saying why
    sessionStorage.removeItem(KEY);
    sessionStorage.setItem("lockgate.signin-reason", message);
    location.hash = "#/signin";
  }
  return new ApiError(response.status, message, body);
}

const GET_RETRY_MS = 300; // before a GET that failed at the network level is sent again

/**
 * Call a REST route: `path` is absolute ("/v1/endpoints") or a full URL (a job API URL).
 * Resolves to the parsed JSON (null for 204); throws ApiError with the server's `error`.
 * A 401 signs the person out (back to the sign-in page) unless `redirect` is false.
 */
export async function api(path, options = {}) {
  return (await call(path, options)).body;
}

/**
 * One page of a list that pages (GET /v1/endpoints?limit=…): {items, next}, where `next`
 * is the continue token for the next page (the answer's X-Continue), or null on the last.
 */
export async function listPage(path, options = {}) {
  const {body, response} = await call(path, options);
  return {items: body, next: response.headers.get("X-Continue")};
}

async function call(path, {method = "GET", body, signal, headers: extra, redirect = true} = {}) {
  const init = {method, headers: headers(extra), signal};
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers["content-type"] = "application/json";
  }
  let response;
  for (let attempt = 0; ; attempt++) {
    try {
      response = await fetch(path, init);
      break;
    } catch (err) {
      if (err.name === "AbortError") throw err;
      // A read that failed at the network level (the browser saw the machine's network
      // change, Chromium's ERR_NETWORK_CHANGED; a connection reset) is tried once more: it
      // changes nothing. A write is not: it may have reached the server.
      if (method !== "GET" || attempt >= 1) {
        throw new ApiError(0, `cannot reach ${path}: ${err.message}`, null);
      }
      await new Promise((resolve) => setTimeout(resolve, GET_RETRY_MS));
    }
  }
  if (!response.ok) throw await failure(response, redirect);
  if (response.status === 204) return {body: null, response};
  const text = await response.text();
  return {body: text ? JSON.parse(text) : null, response};
}

/**
 * Send any request with the signed-in key (a load-balancing endpoint's route) and resolve to
 * the raw Response whatever its status: a 401 there is the route's, not a reason to sign out.
 * An `authorization` among `extra` (any case) is sent instead of the key.
 */
export function send(url, {method = "GET", headers: extra = {}, body, signal} = {}) {
  const own = Object.keys(extra).some((k) => k.toLowerCase() === "authorization");
  return fetch(url, {method, headers: own ? extra : headers(extra), body, signal});
}

/** The job API base of an endpoint record (`jobApiUrl` without its trailing slash, so
 * `${jobApi(record)}/runsync` is a valid route). */
export function jobApi(record) {
  return (record.jobApiUrl || record.status?.jobApiUrl || `${location.origin}/v2/${record.id}`).replace(/\/+$/, "");
}

/**
 * Read Server-Sent Events from `path` (fetch, so the key goes in a header: EventSource
 * cannot send one). Calls onEvent({event, data, id}) per event; `data` is parsed JSON when
 * it is JSON, `id` the event's id (null without one). Resolves when the stream ends; abort
 * with `signal`; `lastEventId` resumes a stream after that event (the Last-Event-ID header).
 */
export async function events(path, onEvent, {signal, lastEventId = null} = {}) {
  const extra = {accept: "text/event-stream"};
  if (lastEventId) extra["last-event-id"] = lastEventId;
  const response = await fetch(path, {headers: headers(extra), signal});
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (!data.length) continue;
      const text = data.join("\n");
      let parsed = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // plain text data
      }
      onEvent({event, data: parsed, id});
    }
  }
}

let aboutAnswer = null;

/**
 * What the serving process is (GET /v1/about, read once per page load): {mode: "dev" or
 * "cluster", commandLineEndpoint: the id `lockgate dev`'s command line defines, or null,
 * commandLineFields: the fields that command line names}.
 * A server without the route is taken for a cluster.
 */
export function about() {
  aboutAnswer ??= api("/v1/about", {redirect: false}).catch((err) => {
    if (err.status === 404) return {mode: "cluster", commandLineEndpoint: null, commandLineFields: []};
    aboutAnswer = null; // asked again next time (a network blip)
    throw err;
  });
  return aboutAnswer;
}

/** Why dev mode hides the fields that mean nothing for a local process. */
export const DEV_MODE_NOTE = "Not used in dev mode: workers are local processes, so compute type, "
  + "GPU types and count, CUDA versions, CPU flavours, vCPUs, data centres and FlashBoot are kept "
  + "but change nothing.";

/** What dev mode does with a template made from an image (dev/launch.py template_launch). */
export const DEV_IMAGE_NOTE = "Dev mode does not pull or run the image: each worker is a local "
  + "process running the entrypoint then the start command on this machine (a leading python is "
  + "the Python that runs lockgate dev; paths are relative to the folder lockgate dev started in), "
  + "with these environment variables. The image, ports, disk and registry credential are kept "
  + "for a cluster.";

/** The note of the command-line endpoint (dev mode): which edits the next start keeps. */
export function commandLineNote(info, id) {
  if (info?.mode !== "dev" || info.commandLineEndpoint !== id) return null;
  const flagged = (info.commandLineFields || []).filter((f) => f !== "templateId");
  const except = flagged.length
    ? ` except ${flagged.join(", ")}, which the command line's flags set again`
    : "";
  return "This endpoint comes from the lockgate dev command line: edits made here are kept at "
    + `the next lockgate dev start${except}. Its handler (templateId) comes from the command `
    + "line only: change the command line for it.";
}
