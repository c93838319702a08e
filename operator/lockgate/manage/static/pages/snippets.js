// The Overview's "Call it" card: the job API's routes and ready cURL, Python (runpod SDK or
// requests), JavaScript (fetch) and OpenAI-SDK snippets filled with the endpoint's URL (the
// key as a placeholder). Every queue endpoint answers the OpenAI API at `{url}/openai/v1`
// (docs/openai.md); what it answers is its worker's (RunPod's vLLM worker, examples/openai).
import {copyButton, h, replace} from "../dom.js";

export const KEY_PLACEHOLDER = "YOUR_API_KEY";
const SAMPLE = '{"input": {"prompt": "Hello"}}';

/** The queue endpoint's routes, relative to its job API URL. */
export const ROUTES = [
  ["POST", "/run", "queue a job; answers its id"],
  ["POST", "/runsync", "run a job and wait for its result"],
  ["GET", "/status/{jobId}", "a job's state and output"],
  ["GET", "/stream/{jobId}", "a streaming job's new chunks"],
  ["POST", "/cancel/{jobId}", "cancel a queued or running job"],
  ["POST", "/retry/{jobId}", "queue a failed or timed-out job again"],
  ["POST", "/purge-queue", "remove every queued job"],
  ["GET", "/health", "workers and jobs by state"],
  ["GET", "/requests", "recent jobs, newest first"],
  ["POST", "/openai/v1/chat/completions", "the OpenAI API (also /completions, /embeddings, GET /models), as the worker answers it"],
];

/** The first lines of a Python (requests) snippet: the URL and the key's header. */
const requestsHead = (base) => [
  "import requests", "", `url = "${base}"`, `headers = {"authorization": "Bearer ${KEY_PLACEHOLDER}"}`, ""];

/** The first lines of a JavaScript (fetch) snippet: the URL and the headers. */
const fetchHead = (base) => [
  `const url = "${base}";`,
  `const headers = {"content-type": "application/json", authorization: "Bearer ${KEY_PLACEHOLDER}"};`, ""];

/**
 * {curl, python, requests, javascript} for run / runsync / status of the job API at `url`
 * (no trailing /), and `openai`: a chat completion through its OpenAI route.
 */
export function snippets(url) {
  const base = url.replace(/\/+$/, "");
  const cut = base.lastIndexOf("/");
  const urlBase = base.slice(0, cut); // runpod.endpoint_url_base: the URL without the id
  const id = decodeURIComponent(base.slice(cut + 1));
  const auth = `authorization: Bearer ${KEY_PLACEHOLDER}`;
  const curl = [
    `curl -X POST ${base}/runsync -H 'content-type: application/json' -H '${auth}' -d '${SAMPLE}'`,
    `curl -X POST ${base}/run -H 'content-type: application/json' -H '${auth}' -d '${SAMPLE}'`,
    `curl ${base}/status/JOB_ID -H '${auth}'`,
  ].join("\n");
  const python = [
    "import runpod",
    "",
    `runpod.api_key = "${KEY_PLACEHOLDER}"`,
    `runpod.endpoint_url_base = "${urlBase}"`,
    `endpoint = runpod.Endpoint("${id}")`,
    "",
    'print(endpoint.run_sync({"prompt": "Hello"}, timeout=60))  # /runsync',
    'job = endpoint.run({"prompt": "Hello"})  # /run',
    "print(job.status())  # /status",
    "print(job.output(timeout=60))",
  ].join("\n");
  const requests = [
    ...requestsHead(base),
    'done = requests.post(f"{url}/runsync", json={"input": {"prompt": "Hello"}}, headers=headers, timeout=120)',
    "print(done.json())",
    'queued = requests.post(f"{url}/run", json={"input": {"prompt": "Hello"}}, headers=headers, timeout=30).json()',
    'print(requests.get(f"{url}/status/{queued[\'id\']}", headers=headers, timeout=30).json())',
  ].join("\n");
  const javascript = [
    ...fetchHead(base),
    `const done = await fetch(\`\${url}/runsync\`, {method: "POST", headers, body: JSON.stringify({input: {prompt: "Hello"}})});`,
    "console.log(await done.json());",
    `const queued = await (await fetch(\`\${url}/run\`, {method: "POST", headers, body: JSON.stringify({input: {prompt: "Hello"}})})).json();`,
    "console.log(await (await fetch(`${url}/status/${queued.id}`, {headers})).json());",
  ].join("\n");
  const openai = [
    "from openai import OpenAI",
    "",
    `client = OpenAI(base_url="${base}/openai/v1", api_key="${KEY_PLACEHOLDER}")`,
    "model = client.models.list().data[0].id  # the first model the worker serves",
    "chat = client.chat.completions.create(",
    '    model=model, messages=[{"role": "user", "content": "Hello"}]',
    ")",
    "print(chat.choices[0].message.content)",
  ].join("\n");
  return {curl, python, requests, javascript, openai};
}

/**
 * {curl, requests, javascript, openai} for a load-balancing endpoint at `url` (its
 * `/lb/{id}/`, ending with /): any method and path goes to a worker as that path; the
 * OpenAI SDK's base_url is `{url}v1` when the worker serves that API (docs/load-balancing.md).
 */
export function lbSnippets(url) {
  const base = url.endsWith("/") ? url : `${url}/`;
  const auth = `authorization: Bearer ${KEY_PLACEHOLDER}`;
  const curl = [
    `curl ${base}ping -H '${auth}'`,
    `curl -X POST ${base}v1/chat/completions -H 'content-type: application/json' -H '${auth}' \\`,
    `  -d '{"model": "any", "messages": [{"role": "user", "content": "Hello"}]}'`,
  ].join("\n");
  const requests = [
    ...requestsHead(base),
    'print(requests.get(f"{url}ping", headers=headers, timeout=330).status_code)',
    'answer = requests.post(f"{url}v1/chat/completions", headers=headers, timeout=330,',
    '                       json={"model": "any", "messages": [{"role": "user", "content": "Hello"}]})',
    "print(answer.json())",
  ].join("\n");
  const javascript = [
    ...fetchHead(base),
    "console.log((await fetch(`${url}ping`, {headers})).status);",
    'const answer = await fetch(`${url}v1/chat/completions`, {method: "POST", headers,',
    '  body: JSON.stringify({model: "any", messages: [{role: "user", content: "Hello"}]})});',
    "console.log(await answer.json());",
  ].join("\n");
  const openai = [
    "from openai import OpenAI",
    "",
    `client = OpenAI(base_url="${base}v1", api_key="${KEY_PLACEHOLDER}")`,
    "chat = client.chat.completions.create(",
    '    model="any", messages=[{"role": "user", "content": "Hello"}]',
    ")",
    "print(chat.choices[0].message.content)",
  ].join("\n");
  return {curl, requests, javascript, openai};
}

/** The card: routes (a queue endpoint's) or how a load-balancing endpoint is called, then
 * one snippet at a time chosen by language tabs. */
export function callCard(url, {lb = false} = {}) {
  const code = lb ? lbSnippets(url) : snippets(url);
  const languages = lb
    ? [["curl", "cURL"], ["requests", "Python (requests)"], ["javascript", "JavaScript (fetch)"],
      ["openai", "Python (OpenAI SDK)"]]
    : [["curl", "cURL"], ["python", "Python (runpod SDK)"], ["requests", "Python (requests)"],
      ["javascript", "JavaScript (fetch)"], ["openai", "Python (OpenAI SDK)"]];
  const panel = h("div");
  const buttons = languages.map(([key, label]) => h("button", {
    type: "button", class: "small", role: "tab", dataset: {lang: key},
    onclick: () => choose(key),
  }, label));
  function choose(key) {
    for (const b of buttons) b.setAttribute("aria-selected", String(b.dataset.lang === key));
    const label = languages.find(([k]) => k === key)[1];
    replace(panel,
      h("pre", {class: "snippet", "aria-label": `${label} snippet`, dataset: {lang: key}}, code[key]),
      copyButton(code[key], `Copy ${label}`),
      key === "openai" && !lb ? h("p", {class: "hint"}, "The OpenAI route (",
        h("code", {}, "/openai/v1"), ") runs each request as a job: the worker must answer it, ",
        "as RunPod's vLLM worker does (see docs/openai.md).") : null,
      key === "openai" && lb ? h("p", {class: "hint"}, "Sent to the worker as ",
        h("code", {}, "/v1/…"), ": it works when the worker's own server answers the OpenAI API.") : null);
  }
  choose("curl");
  return h("section", {class: "card", "aria-labelledby": "call-it"},
    h("h2", {id: "call-it"}, "Call it"),
    lb ? h("p", {class: "hint"}, "Any method and path after ", h("code", {}, url),
      " reaches a worker's own HTTP server as that path; ", h("code", {}, "ping"),
      " is its health check. A request waits (is held) while no worker is ready.")
      : h("div", {class: "table-wrap"}, h("table", {"aria-label": "Routes", class: "routes"},
      h("caption", {}, "Routes, after ", h("code", {}, url)),
      h("thead", {}, h("tr", {}, ["Method", "Path", "What"].map((t) => h("th", {scope: "col"}, t)))),
      h("tbody", {}, ROUTES.map(([method, path, what]) => h("tr", {},
        h("td", {class: "mono"}, method), h("td", {class: "mono"}, path), h("td", {}, what)))))),
    h("div", {class: "row", role: "tablist", "aria-label": "Snippet language"}, buttons),
    panel,
    h("p", {class: "hint"}, `Replace ${KEY_PLACEHOLDER} with a key that has the jobs scope (API keys page).`));
}
