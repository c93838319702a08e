// The Builds tab of an endpoint with a git source (docs/builds.md): the builds, newest first
// (GET /v2/serverless/{id}/builds, cursor-paged: the first page refreshed every 2 s, older
// pages on demand), a build's live log (GET …/builds/{buildId}/logs, Server-Sent Events,
// resumed with Last-Event-ID), Cancel on a build not yet ended (POST …/cancel), Start a
// build (POST …/builds, optional ref), and Roll back to a COMPLETED build that is not the
// one running, through its GIT_BUILD release (POST …/releases/{releaseId}/rollback).
import {api, events} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";
import {useLogStyles} from "./joblogs.js";

const REFRESH_MS = 2000;
const RETRY_MS = 2000; // a log stream cut before its build ended is opened again after this
const KEEP = 5000; // log lines kept in the page
const ENDED = ["COMPLETED", "FAILED", "CANCELLED", "TEST_FAILED"];
const TONE = {COMPLETED: "ok", FAILED: "bad", TEST_FAILED: "bad", CANCELLED: "muted"};

/** Load the Builds tab's stylesheet once (CSP: our own files only). */
function useStyles() {
  if (document.getElementById("builds-css")) return;
  const href = new URL("./builds.css", import.meta.url).href;
  document.head.append(h("link", {id: "builds-css", rel: "stylesheet", href}));
}

/**
 * The build the workers run, from the releases (newest first): a GIT_BUILD release names
 * it; a MANUAL release keeps the one before unless its diff changes `build` (a removed
 * source, a rollback to a release from before any build). null: none runs.
 */
export function runningBuild(releases) {
  for (const r of releases) {
    if (r.source === "GIT_BUILD" && r.buildId) return r.buildId;
    const change = (r.diff || []).find((d) => d.field === "build");
    if (change) return change.new?.buildId || null;
  }
  return null;
}

/** The newest GIT_BUILD release that brought `buildId` (a rollback goes through it). */
export function releaseOf(releases, buildId) {
  return releases.find((r) => r.source === "GIT_BUILD" && r.buildId === buildId) || null;
}

const when = (ts) => (ts ? ts.replace("T", " ").replace("Z", " UTC") : "—");

function took(build) {
  if (!build.startedAt) return "";
  const end = build.completedAt ? Date.parse(build.completedAt) : Date.now();
  const s = Math.max(0, Math.round((end - Date.parse(build.startedAt)) / 1000));
  return s < 120 ? `${s} s` : `${Math.round(s / 60)} min`;
}

export async function render(view, ctx) {
  useStyles();
  useLogStyles();
  const id = ctx.params.id;
  const base = `/v2/serverless/${encodeURIComponent(id)}`;
  const record = await api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal: ctx.signal});
  const git = record.source?.git;
  if (!git) {
    replace(view, h("h2", {}, "Builds"), h("p", {}, "This endpoint has no git source: its workers run its template. ",
      h("a", {href: `#/endpoints/${encodeURIComponent(id)}/edit`}, "Add a source in Edit"), "."));
    return;
  }

  const status = h("div", {"aria-live": "assertive"});
  const table = h("div", {class: "table-wrap"});
  const more = h("div", {class: "row"});
  const logPanel = h("section", {class: "card build-log", hidden: true, "aria-labelledby": "build-log-title"});
  let first = []; // the newest page, refreshed
  let older = []; // pages fetched with "Older builds", kept as they were
  let next = null; // the cursor after the last page shown
  let moreLoaded = false;
  let releases = [];
  let running = null;
  let following = null; // {build, stop()} of the log shown

  const refInput = h("input", {id: "build-ref", name: "ref", type: "text", spellcheck: "false", autocomplete: "off",
    placeholder: git.ref || "the default branch", maxlength: 255});
  const startButton = h("button", {type: "submit", class: "primary"}, "Start a build");
  const start = h("form", {class: "row build-start", onsubmit: async (event) => {
    event.preventDefault();
    startButton.disabled = true;
    try {
      const ref = refInput.value.trim();
      const build = await api(`${base}/builds`, {method: "POST", body: ref ? {ref} : {}, signal: ctx.signal});
      replace(status);
      toast(`Build ${build.id} asked`);
      refInput.value = "";
      await refresh();
      showLog(build);
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
    } finally {
      startButton.disabled = false;
    }
  }},
  h("label", {for: "build-ref"}, "Branch, tag or commit (optional)"), h("div", {class: "grow"}, refInput), startButton);

  // Roll back: a confirmation dialog, as the Releases tab's
  let chosen = null;
  const question = h("p", {});
  const dialog = h("dialog", {"aria-labelledby": "build-rollback-title"},
    h("h2", {id: "build-rollback-title"}, "Roll back to this build?"),
    question,
    h("form", {method: "dialog", class: "row"},
      h("button", {type: "submit", value: "cancel"}, "Keep the current build"),
      h("button", {type: "submit", value: "rollback", class: "danger"}, "Roll back")));
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "rollback" || !chosen) return;
    const {build, release} = chosen;
    try {
      const made = await api(`${base}/releases/${encodeURIComponent(release.id)}/rollback`, {method: "POST"});
      replace(status);
      toast(`Version ${made.version} runs build ${build.id}`);
      await refresh();
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
    }
  });
  function askRollback(build, release) {
    chosen = {build, release};
    replace(question, `The workers switch to build ${build.id} (commit ${build.commitHash || "?"}) at once, `
      + `with no rebuild: version ${release.version}'s configuration becomes a new version. Idle workers `
      + "are replaced at once; a busy one finishes its job first.");
    dialog.returnValue = "";
    dialog.showModal();
  }

  async function cancel(build, button) {
    button.disabled = true;
    try {
      await api(`${base}/builds/${encodeURIComponent(build.id)}/cancel`, {method: "POST", signal: ctx.signal});
      toast(`Build ${build.id} cancelled`);
      replace(status);
      await refresh();
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
      button.disabled = false;
    }
  }

  function actions(build) {
    const out = [h("button", {type: "button", class: "small", "aria-label": `Log of ${build.id}`,
      "aria-pressed": String(following?.build.id === build.id), onclick: () => showLog(build)}, "Log")];
    if (!ENDED.includes(build.status)) {
      const button = h("button", {type: "button", class: "small danger", "aria-label": `Cancel ${build.id}`});
      button.textContent = "Cancel";
      button.addEventListener("click", () => cancel(build, button));
      out.push(button);
    }
    if (build.status === "COMPLETED") {
      const release = releaseOf(releases, build.id);
      if (build.id === running) out.push(h("span", {class: "badge ok running"}, "running"));
      else if (release) {
        out.push(h("button", {type: "button", class: "small", "aria-label": `Roll back to ${build.id}`,
          onclick: () => askRollback(build, release)}, "Roll back"));
      } else {
        out.push(h("span", {class: "hint", title: "No release of this build is kept (the newest 100 releases are)."}, "no release"));
      }
    }
    return out;
  }

  function row(build) {
    const message = (build.commitMessage || "").split("\n")[0];
    return h("tr", {dataset: {build: build.id, status: build.status}},
      h("td", {"data-label": "Build", class: "mono"}, build.id,
        h("div", {class: "hint"}, build.reason === "MANUAL" ? "started by hand" : `on ${build.reason.toLowerCase()}`)),
      h("td", {"data-label": "Status"}, h("span", {class: `badge ${TONE[build.status] || "warn"}`}, build.status),
        build.error ? h("div", {class: "build-error"}, build.error) : null,
        build.failedTest ? h("div", {class: "build-error"}, `test ${build.failedTest.name}: ${build.failedTest.reason}`) : null),
      h("td", {"data-label": "Commit"}, build.commitHash ? h("code", {title: build.commit || ""}, build.commitHash) : "—",
        message ? h("div", {class: "hint commit-message"}, message) : null),
      h("td", {"data-label": "Ref"}, build.branch || build.ref || git.ref || "default branch"),
      h("td", {"data-label": "Started", class: "mono"}, when(build.startedAt || build.createdAt),
        took(build) ? h("div", {class: "hint"}, took(build)) : null),
      h("td", {class: "build-actions"}, actions(build)));
  }

  function draw() {
    const all = [...first, ...older.filter((b) => !first.some((f) => f.id === b.id))];
    replace(table, all.length
      ? h("table", {class: "keys builds", "aria-label": "Builds"},
        h("thead", {}, h("tr", {}, ["Build", "Status", "Commit", "Ref", "Started", ""].map((c) => h("th", {scope: "col"}, c)))),
        h("tbody", {}, all.map(row)))
      : h("p", {class: "hint"}, "No build yet: start one above, or let the trigger start one."));
    replace(more, next ? h("button", {type: "button", onclick: loadOlder}, "Older builds") : null);
  }

  async function loadOlder() {
    const page = await api(`${base}/builds?cursor=${encodeURIComponent(next)}`, {signal: ctx.signal});
    older = [...older, ...page.builds];
    next = page.pagination.nextCursor;
    moreLoaded = true;
    draw();
  }

  async function refresh() {
    const [page, rel] = await Promise.all([
      api(`${base}/builds`, {signal: ctx.signal}),
      api(`${base}/releases`, {signal: ctx.signal}).catch((err) => {
        if (err.name === "AbortError") throw err;
        return {releases: []}; // builds still show; no rollback offered
      }),
    ]);
    first = page.builds;
    if (!moreLoaded) next = page.pagination.nextCursor;
    releases = rel.releases;
    running = runningBuild(releases);
    draw();
    if (following) {
      const now = first.find((b) => b.id === following.build.id);
      if (now) following.update(now);
    }
  }

  /** The log of `build`, live until it has ended and its log is drained. */
  function showLog(build) {
    following?.stop();
    const controller = new AbortController();
    ctx.signal.addEventListener("abort", () => controller.abort());
    const state = h("span", {class: "logs-state", role: "status", "aria-live": "polite"}, "Connecting…");
    const badge = h("span", {class: `badge ${TONE[build.status] || "warn"}`}, build.status);
    const box = h("div", {class: "log-view build-lines", role: "log", "aria-label": "Build log lines", tabindex: "0"},
      h("div", {class: "log-empty"}, "No line yet."));
    const problem = h("div");
    let lastId = null;
    let count = 0;
    let current = build;
    replace(logPanel,
      h("div", {class: "row"}, h("h2", {id: "build-log-title", class: "grow"}, "Log of ", h("code", {}, build.id), " ", badge), state,
        h("button", {type: "button", class: "small", onclick: () => close()}, "Close")),
      problem, box);
    logPanel.hidden = false;
    const close = () => { following?.stop(); following = null; logPanel.hidden = true; draw(); };
    const add = (line) => {
      box.querySelector(".log-empty")?.remove();
      const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
      box.append(h("div", {class: `build-line ${line.source || ""}`},
        h("span", {class: "ts", title: line.ts}, (line.ts || "").slice(11, 19)),
        h("span", {class: "src"}, line.source || ""),
        h("span", {class: "text"}, line.line)));
      if (++count > KEEP) box.firstElementChild.remove();
      if (stick) box.scrollTop = box.scrollHeight;
    };
    following = {
      build,
      stop: () => controller.abort(),
      update(now) {
        current = now;
        badge.className = `badge ${TONE[now.status] || "warn"}`;
        badge.textContent = now.status;
        if (ENDED.includes(now.status) && state.textContent === "Live") {
          state.textContent = "Ended: the last lines may still come";
        }
      },
    };
    draw();
    (async () => {
      const path = `${base}/builds/${encodeURIComponent(build.id)}/logs?tail=${KEEP}`;
      while (!controller.signal.aborted) {
        try {
          const opened = events(path, ({event, data, id: eventId}) => {
            if (eventId) lastId = eventId;
            if (event === "dropped") box.append(h("div", {class: "log-note"}, `${data.dropped} line(s) skipped: ${data.why}`));
            else if (data && typeof data === "object") add(data);
          }, {signal: controller.signal, lastEventId: lastId});
          state.textContent = "Live";
          state.className = "logs-state live";
          replace(problem);
          await opened;
        } catch (err) {
          if (err.name === "AbortError") return;
          replace(problem, errorBox(err));
          if (err.status && err.status < 500) { state.textContent = "Stopped"; return; }
        }
        if (controller.signal.aborted) return;
        // the stream ends once the build has ended and its log is drained
        const now = await api(`${base}/builds/${encodeURIComponent(build.id)}`, {signal: controller.signal}).catch(() => current);
        following?.update(now);
        if (ENDED.includes(now.status)) {
          state.textContent = `Ended: ${now.status}`;
          state.className = "logs-state";
          return;
        }
        state.textContent = "Reconnecting…";
        await new Promise((done) => setTimeout(done, RETRY_MS));
      }
    })();
  }

  replace(view,
    h("h2", {}, "Builds"),
    h("p", {class: "hint"}, "Built from ", h("code", {}, git.url), git.ref ? [" at ", h("code", {}, git.ref)] : " (default branch)",
      `; builds on ${git.trigger === "MANUAL" ? "request only" : git.trigger.toLowerCase()}. A completed build becomes a `
      + "GIT_BUILD release the workers run; Roll back runs an earlier one again without a rebuild."),
    start, status, table, more, logPanel, dialog);
  ctx.every(REFRESH_MS, refresh);
  return () => following?.stop();
}
