// The console's shell: sign-in, the hash router, the endpoint tabs. Pages live in pages/*.js;
// each exports `render(view, ctx)` and may return a cleanup function (see `Context` below).

import {api, apiKey, setApiKey, signOut} from "./api.js";
import {errorBox, h, replace} from "./dom.js";
import * as batches from "./pages/batches.js";
import * as builds from "./pages/builds.js";
import * as create from "./pages/create.js";
import * as edit from "./pages/edit.js";
import * as endpoint from "./pages/endpoint.js";
import * as endpoints from "./pages/endpoints.js";
import * as keys from "./pages/keys.js";
import * as logs from "./pages/logs.js";
import * as metrics from "./pages/metrics.js";
import * as releases from "./pages/releases.js";
import * as requests from "./pages/requests.js";
import * as resources from "./pages/resources.js";
import * as templates from "./pages/templates.js";
import * as usage from "./pages/usage.js";
import * as workers from "./pages/workers.js";

// [hash pattern, page module, title]; `:id` is an endpoint id (a template's under templates/).
const ROUTES = [
  ["endpoints", endpoints, "Endpoints"],
  ["new", create, "New endpoint"],
  ["keys", keys, "API keys"],
  ["templates", templates, "Templates"],
  ["templates/:id", {render: templates.renderOne}, "Template"],
  ["credentials", {render: resources.credentials}, "Registry credentials"],
  ["volumes", {render: resources.volumes}, "Network volumes"],
  ["usage", usage, "Usage"],
  ["endpoints/:id", endpoint, "Overview"],
  ["endpoints/:id/requests", requests, "Requests"],
  ["endpoints/:id/workers", workers, "Workers"],
  ["endpoints/:id/metrics", metrics, "Metrics"],
  ["endpoints/:id/logs", logs, "Logs"],
  ["endpoints/:id/releases", releases, "Releases"],
  ["endpoints/:id/builds", builds, "Builds"],
  ["endpoints/:id/batches", batches, "Batches"],
  ["endpoints/:id/edit", edit, "Edit"],
];
// The tabs of one endpoint, in order.
const TABS = [
  ["", "Overview"],
  ["/requests", "Requests"],
  ["/workers", "Workers"],
  ["/metrics", "Metrics"],
  ["/logs", "Logs"],
  ["/releases", "Releases"],
  ["/builds", "Builds"], // shown for an endpoint with a git source only (`showBuildsTab`)
  ["/batches", "Batches"], // Batch Jobs (docs/batch-jobs.md)
  ["/edit", "Edit"],
];

let leave = () => {};

function match(path) {
  const parts = path.split("/").filter(Boolean);
  for (const [pattern, page, title] of ROUTES) {
    const want = pattern.split("/");
    if (want.length !== parts.length) continue;
    const params = {};
    if (want.every((p, i) => (p === ":id" ? (params.id = decodeURIComponent(parts[i])) : p === parts[i]))) {
      return {page, title, params};
    }
  }
  return null;
}

function tabs(id, current, signal) {
  const base = `#/endpoints/${encodeURIComponent(id)}`;
  const nav = h("nav", {class: "tabs", "aria-label": `Endpoint ${id}`},
    TABS.map(([suffix, label]) => h("a", {
      href: base + suffix, "aria-current": label === current ? "page" : null,
      hidden: label === "Builds" && current !== "Builds",
    }, label)));
  if (current !== "Builds") showBuildsTab(nav, id, signal);
  return nav;
}

/** Show the Builds tab once the endpoint's record says it has a git source. */
async function showBuildsTab(nav, id, signal) {
  try {
    const record = await api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal});
    if (record.source?.git) nav.querySelector('a[href$="/builds"]').hidden = false;
  } catch {
    // the page itself says what is wrong
  }
}

/**
 * Context handed to a page's render(view, ctx):
 *   params   {id} for endpoint pages
 *   query    URLSearchParams of the hash's "?…" part
 *   signal   AbortSignal aborted when the person leaves the page (pass it to api()/events())
 *   every(ms, fn)  call fn now and every ms until the page is left (errors are shown once)
 *   go(hash) navigate ("#/endpoints/x")
 */
async function show() {
  leave();
  const main = document.getElementById("main");
  const [path, search] = location.hash.replace(/^#\/?/, "").split("?");
  document.getElementById("nav").hidden = !apiKey();
  if (!apiKey() || path === "signin") return signIn(main);
  const route = match(path || "endpoints");
  if (!route) return replace(main, h("h1", {}, "Not found"), h("p", {}, h("a", {href: "#/endpoints"}, "Endpoints")));
  const controller = new AbortController();
  const cleanups = [];
  leave = () => {
    controller.abort();
    cleanups.forEach((fn) => fn());
    leave = () => {};
  };
  const ctx = {
    params: route.params,
    query: new URLSearchParams(search || ""),
    signal: controller.signal,
    go: (hash) => { location.hash = hash; },
    every(ms, fn) {
      let timer;
      const tick = async () => {
        if (controller.signal.aborted) return;
        try {
          await fn();
        } catch (err) {
          if (err.name !== "AbortError") console.warn(err);
        }
        if (!controller.signal.aborted) timer = setTimeout(tick, ms);
      };
      tick();
      cleanups.push(() => clearTimeout(timer));
    },
  };
  const view = h("section", {class: "page"});
  const header = route.params.id && path.startsWith("endpoints/")
    ? [h("p", {class: "crumbs"}, h("a", {href: "#/endpoints"}, "Endpoints"), " / "),
       h("h1", {}, route.params.id), tabs(route.params.id, route.title, controller.signal)]
    : [];
  replace(main, ...header, view);
  document.title = `${route.params.id ? `${route.params.id} · ` : ""}${route.title} · lockgate`;
  try {
    const cleanup = await route.page.render(view, ctx);
    if (typeof cleanup === "function") cleanups.push(cleanup);
  } catch (err) {
    if (err.name !== "AbortError") view.append(errorBox(err));
  }
}

function signIn(main) {
  const reason = sessionStorage.getItem("lockgate.signin-reason");
  sessionStorage.removeItem("lockgate.signin-reason");
  const input = h("input", {
    id: "key", name: "key", type: "password", autocomplete: "current-password",
    required: true, "aria-describedby": "key-help",
  });
  const status = h("div", {"aria-live": "assertive"}, reason ? errorBox(new Error(reason)) : null);
  const form = h("form", {class: "card narrow", onsubmit: async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    setApiKey(key);
    try {
      await api("/v1/endpoints?limit=1&view=summary", {redirect: false}); // cheap: any admin route
      location.hash = "#/endpoints";
      if (location.hash === "#/endpoints") show();
    } catch (err) {
      sessionStorage.removeItem("lockgate.key");
      const expired = err.status === 401 && err.message.startsWith("API key expired");
      const message = expired
        ? `${err.message}: sign in with another admin key (lockgate keys create NAME --scope admin makes one).`
        : err.status === 401 || err.status === 403
        ? "This key is not an admin key of this lockgate (wrong, revoked or without the admin scope)."
        : err.message;
      replace(status, errorBox(new Error(message)));
      input.focus();
    }
  }},
    h("h1", {}, "Sign in"),
    h("label", {for: "key"}, "Admin API key"),
    input,
    h("p", {id: "key-help", class: "hint"},
      "The key stays in this browser tab's session storage only. ",
      h("code", {}, "lockgate dev"), " prints one; on a cluster, create one with ",
      h("code", {}, "lockgate keys create --scope admin"), "."),
    status,
    h("button", {type: "submit", class: "primary"}, "Sign in"));
  document.getElementById("nav").hidden = true;
  replace(main, form);
  document.title = "Sign in · lockgate";
  input.focus();
}

document.getElementById("signout").addEventListener("click", signOut);
window.addEventListener("hashchange", show);
show();
