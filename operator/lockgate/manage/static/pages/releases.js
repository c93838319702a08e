// The Releases tab: GET /v2/serverless/{id}/releases (newest first, refreshed every 2 s):
// how far the rollout is, and each release's workers and changes; "Roll back" on an older
// release (POST …/releases/{releaseId}/rollback) makes its configuration the newest version;
// a GIT_BUILD release's build runs again at once, with no rebuild (the Builds tab offers the same).
import {api} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";

const REFRESH_MS = 2000;

/** "Rollout: 1 of 2 workers on version 4 (50 %)", or that every worker runs it. */
export function rolloutText(body) {
  const r = body.rollout;
  if (!r.workersTotal) return `Version ${body.endpointVersion}: no worker runs now.`;
  if (!r.inProgress) return `All ${r.workersTotal} worker(s) run version ${body.endpointVersion}.`;
  return `Rolling out version ${body.endpointVersion}: ${r.workersOnLatest} of ${r.workersTotal} `
    + `worker(s) on it (${r.percentOnLatest} %); the others finish what they hold first.`;
}

/** A JSON value short enough for a table cell. */
function shown(value) {
  if (value === null || value === undefined) return "—";
  const text = typeof value === "string" && value ? value : JSON.stringify(value);
  return text.length > 120 ? `${text.slice(0, 117)}…` : text;
}

function changes(diff) {
  if (!diff.length) return h("span", {class: "hint"}, "no change");
  return h("ul", {class: "changes"}, diff.map((d) => h("li", {},
    h("code", {}, d.field), ": ", h("span", {class: "old"}, shown(d.old)), " → ",
    h("span", {class: "new"}, shown(d.new)))));
}

export async function render(view, ctx) {
  const id = ctx.params.id;
  const path = `/v2/serverless/${encodeURIComponent(id)}/releases`;
  const status = h("div", {"aria-live": "polite"});
  const summary = h("p", {class: "rollout"});
  const table = h("div", {class: "table-wrap"});
  let chosen = null; // the release the dialog asks about
  const question = h("p", {});
  const dialog = h("dialog", {"aria-labelledby": "rollback-title"},
    h("h2", {id: "rollback-title"}, "Roll back?"),
    question,
    h("form", {method: "dialog", class: "row"},
      h("button", {type: "submit", value: "cancel"}, "Keep the current version"),
      h("button", {type: "submit", value: "rollback", class: "danger"}, "Roll back")));
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "rollback" || !chosen) return;
    const release = chosen;
    try {
      const made = await api(`${path}/${encodeURIComponent(release.id)}/rollback`, {method: "POST"});
      replace(status);
      toast(`Version ${made.version} made from version ${release.version}`);
      await refresh();
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
    }
  });
  function ask(release) {
    chosen = release;
    const build = release.source === "GIT_BUILD" && release.buildId
      ? ` The workers switch back to build ${release.buildId} at once, with no rebuild.` : "";
    replace(question, `The configuration of version ${release.version} becomes a new version; `
      + `the workers are replaced as for any release (a busy one finishes its job first).${build}`);
    dialog.returnValue = "";
    dialog.showModal();
  }

  replace(view, h("h2", {}, "Releases"),
    h("p", {class: "hint"}, "Every change of what a worker runs (image, start command, env, "
      + "disk, ports, registry credential, models, the template) is a new version. Idle workers "
      + "are replaced at once; a busy one finishes its job first."),
    summary, status, table, dialog);

  async function refresh() {
    const body = await api(path, {signal: ctx.signal});
    replace(summary, rolloutText(body));
    replace(table, h("table", {class: "keys", "aria-label": "Releases"},
      h("thead", {}, h("tr", {}, ["Version", "Source", "Created", "Workers", "Changes", ""].map(
        (c) => h("th", {scope: "col"}, c)))),
      h("tbody", {}, body.releases.map((r) => h("tr", {dataset: {release: r.id}},
        h("td", {"data-label": "Version"}, String(r.version),
          r.version === body.endpointVersion ? [" ", h("span", {class: "badge"}, "latest")] : null),
        h("td", {"data-label": "Source"}, r.source === "GIT_BUILD"
          ? [h("span", {class: "badge"}, "GIT_BUILD"), " ", h("code", {}, r.buildId)]
          : h("span", {class: "hint"}, r.source || "MANUAL")),
        h("td", {"data-label": "Created"}, r.createdAt),
        h("td", {"data-label": "Workers"}, String(r.workerCount)),
        h("td", {"data-label": "Changes"}, changes(r.diff)),
        h("td", {}, r.version === body.endpointVersion ? null : h("button", {
          type: "button", class: "small", onclick: () => ask(r),
          "aria-label": `Roll back to version ${r.version}`,
        }, "Roll back")))))));
  }

  ctx.every(REFRESH_MS, refresh);
}
