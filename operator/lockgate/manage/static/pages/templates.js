// The Templates pages: #/templates lists /v1/templates (name, image, how many endpoints use
// each), #/templates/{id} edits one (PATCH) or deletes it (DELETE: 409 names the endpoints
// that use it, shown as the API says it).
import {about, api} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";
import {formErrors, markInvalid} from "./form.js";
import {useStyles} from "./health.js";
import {credentialSelect, DEV_SECRETS_NOTE, envRows, words} from "./template.js";

/** Endpoint ids by the templateId they use: {templateId: [id, …]}. */
export function usersByTemplate(endpoints) {
  const out = {};
  for (const e of endpoints) (out[e.templateId] ??= []).push(e.id);
  return out;
}

export async function render(view, ctx) {
  const [templates, endpoints] = await Promise.all([
    api("/v1/templates", {signal: ctx.signal}), api("/v1/endpoints", {signal: ctx.signal})]);
  const users = usersByTemplate(endpoints);
  replace(view, h("h1", {}, "Templates"),
    h("p", {class: "hint"}, "A template is a worker's image, start command, environment and disk "
      + "(RunPod's /v1/templates). Create one with an endpoint: New endpoint, \"A container image\"."),
    templates.length
      ? h("div", {class: "table-wrap"}, h("table", {class: "keys", "aria-label": "Templates"},
        h("thead", {}, h("tr", {}, ["Name", "Id", "Image", "Used by"].map((c) => h("th", {scope: "col"}, c)))),
        h("tbody", {}, templates.map((t) => h("tr", {dataset: {template: t.id}},
          h("td", {"data-label": "Name"}, h("a", {href: `#/templates/${encodeURIComponent(t.id)}`}, t.name)),
          h("td", {"data-label": "Id"}, h("code", {}, t.id)),
          h("td", {"data-label": "Image"}, h("code", {}, t.imageName)),
          h("td", {"data-label": "Used by"}, usedBy(users[t.id] || [])))))))
      : h("p", {class: "hint"}, "No template."));
}

function usedBy(ids) {
  const n = ids.length;
  return h("span", {title: ids.join(", ")}, `${n} endpoint${n === 1 ? "" : "s"}`);
}

// [field, label, kind, hint]: the editable fields, RunPod's names (docs/endpoint-reference.md).
const FIELDS = [
  ["name", "Name", "text"],
  ["imageName", "Container image", "text"],
  ["dockerStartCmd", "Start command", "words", "Split into words like a shell would (quotes group words)."],
  ["dockerEntrypoint", "Entrypoint (optional)", "words", "Empty: the image's own."],
  ["ports", "HTTP ports", "list", "Comma-separated, e.g. 8000/http"],
  ["containerDiskInGb", "Container disk (GiB)", "number"],
  ["volumeInGb", "Volume (GiB)", "number"],
  ["volumeMountPath", "Volume mount path", "text"],
  ["category", "Category", "text", "NVIDIA, AMD or CPU"],
  ["containerRegistryAuthId", "Registry credential", "credential", "Made on the Credentials page; none: a public image."],
];

/** A start command as the input shows it (words quoted back when they hold spaces). */
function joined(list) {
  return (list || []).map((w) => (/[\s"']/.test(w) ? JSON.stringify(w) : w)).join(" ");
}

export async function renderOne(view, ctx) {
  const id = ctx.params.id;
  const [t, endpoints, info] = await Promise.all([
    api(`/v1/templates/${encodeURIComponent(id)}`, {signal: ctx.signal}),
    api("/v1/endpoints", {signal: ctx.signal}), about()]);
  const users = usersByTemplate(endpoints)[id] || [];
  const inputs = Object.fromEntries(FIELDS.map(([name, , kind]) => {
    if (kind === "credential") return [name, credentialSelect(t[name] || "")];
    const value = kind === "words" ? joined(t[name]) : kind === "list" ? (t[name] || []).join(", ") : t[name] ?? "";
    return [name, h("input", {id: name, name, type: kind === "number" ? "number" : "text", value,
      spellcheck: "false", autocomplete: "off"})];
  }));
  const readme = h("textarea", {id: "readme", name: "readme", rows: 3}, t.readme || "");
  const secretEnv = Object.entries(t.secretEnv || {});
  const secrets = info.mode !== "dev" || secretEnv.length > 0;  // dev mode has no Secrets
  const env = envRows([...Object.entries(t.env || {}), ...secretEnv], {secrets});
  const status = h("div", {"aria-live": "assertive"});
  const body = () => {
    const out = {readme: readme.value, ...env.variables()};
    for (const [name, , kind] of FIELDS) {
      const value = inputs[name].value;
      out[name] = kind === "words" ? words(value) : kind === "list" ? value.split(",").map((s) => s.trim()).filter(Boolean)
        : kind === "number" ? (value === "" ? value : Number(value)) : value.trim();
    }
    return out;
  };
  const form = h("form", {class: "card", novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api(`/v1/templates/${encodeURIComponent(id)}`, {method: "PATCH", body: body(), signal: ctx.signal});
      markInvalid(form, "");
      replace(status);
      toast(`Saved ${id}`);
    } catch (err) {
      if (err.name === "AbortError") return;
      replace(status, formErrors(form, err));
    }
  }},
  h("div", {class: "grid"}, FIELDS.map(([name, label, , hint]) => h("div", {class: "field", dataset: {field: name}},
    h("label", {for: name}, label), inputs[name], hint ? h("p", {class: "hint"}, hint) : null))),
  h("fieldset", {dataset: {field: "env"}}, h("legend", {}, "Environment variables"),
    secrets ? null : h("p", {class: "hint dev-mode-note"}, DEV_SECRETS_NOTE), env.element),
  h("div", {class: "field", dataset: {field: "readme"}}, h("label", {for: "readme"}, "Readme"), readme),
  users.length ? h("p", {class: "hint"}, `Saving rolls the workers of ${users.join(", ")} (queued jobs wait, jobs in hand finish).`) : null,
  status, h("div", {class: "row"}, h("button", {type: "submit", class: "primary"}, "Save"), h("a", {href: "#/templates"}, "All templates")));
  const deleteStatus = h("div", {"aria-live": "assertive"});
  const remove = h("button", {type: "button", class: "danger", onclick: async () => {
    try {
      await api(`/v1/templates/${encodeURIComponent(id)}`, {method: "DELETE", signal: ctx.signal});
      toast(`Deleted ${id}`);
      ctx.go("#/templates");
    } catch (err) {
      if (err.name !== "AbortError") replace(deleteStatus, errorBox(err));
    }
  }}, `Delete ${t.name}`);
  replace(view, h("p", {class: "crumbs"}, h("a", {href: "#/templates"}, "Templates"), " / "),
    h("h1", {}, t.name), h("p", {}, "Id ", h("code", {}, id), " · used by ", usedBy(users)),
    form, h("section", {class: "card"}, h("h2", {}, "Delete"), deleteStatus, remove));
}

/** The template an endpoint uses, read-only, with a link to edit it (the Edit page); null
 * when `templateId` names no template of /v1/templates (a handler file or command in dev
 * mode, or a Template applied with kubectl that the list has not got). */
export async function templateSummary(templateId, signal) {
  const t = (await api("/v1/templates", {signal})).find((x) => x.id === templateId);
  if (!t) return null;
  useStyles(); // dl.settings, as the Overview shows settings
  const row = (label, value) => [h("dt", {}, label), h("dd", {}, value || "—")];
  return h("section", {class: "card template-summary", "aria-labelledby": "template-summary"},
    h("h2", {id: "template-summary"}, `Template: ${t.name}`),
    h("dl", {class: "settings"},
      row("Container image", h("code", {}, t.imageName)),
      row("Start command", joined(t.dockerStartCmd)),
      row("Entrypoint", joined(t.dockerEntrypoint)),
      row("HTTP ports", (t.ports || []).join(", ")),
      row("Environment variables", Object.keys(t.env || {}).join(", ")),
      row("Container disk", `${t.containerDiskInGb} GiB`),
      row("Registry credential", t.containerRegistryAuthId)),
    h("p", {}, h("a", {href: `#/templates/${encodeURIComponent(t.id)}`}, "Edit the template"),
      h("span", {class: "hint"}, " (every endpoint using it rolls its workers)")));
}
