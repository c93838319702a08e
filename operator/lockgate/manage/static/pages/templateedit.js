// The endpoint's template on its Edit page (#/endpoints/{id}/edit): image, start command and
// environment variables editable; "Review template changes" shows the diff and which workers
// restart (this endpoint's, GET /v2/serverless/{id}/workers, and the other endpoints using the
// template) before PATCH /v1/templates/{templateId}. The Templates page edits every field.
import {about, api, DEV_IMAGE_NOTE} from "../api.js";
import {h, replace, toast} from "../dom.js";
import {formErrors, shown} from "./form.js";
import {usersByTemplate} from "./templates.js";
import {DEV_SECRETS_NOTE, envRows, words} from "./template.js";

/** A start command as the input shows it (words quoted back when they hold spaces). */
function joined(list) {
  return (list || []).map((w) => (/[\s"']/.test(w) ? JSON.stringify(w) : w)).join(" ");
}

const EMPTY = {env: {}, secretEnv: {}, dockerStartCmd: [], imageName: ""}; // a field left out

/** [{field, from, to}] of the fields whose value changed (compared as JSON). */
export function templateDiff(before, after) {
  return Object.keys(after)
    .filter((k) => JSON.stringify(before[k] ?? EMPTY[k]) !== JSON.stringify(after[k]))
    .map((field) => ({field, from: before[field] ?? EMPTY[field], to: after[field]}));
}

/** A template field's value for the review: a command as words, variables as NAME=value. */
function valueText(field, value) {
  if (field === "dockerStartCmd") return joined(value) || "—";
  if (value && typeof value === "object") {
    const pairs = Object.entries(value).map(([k, v]) => (typeof v === "object" ? `${k}=${v.name}/${v.key}` : `${k}=${v}`));
    return pairs.join(", ") || "—";
  }
  return shown(value);
}

/** The editable template card of endpoint `record`, or null when its templateId names no
 * template of /v1/templates (a handler file or command in dev mode). */
export async function templateEditor(record, ctx) {
  const [templates, endpoints, info] = await Promise.all([
    api("/v1/templates", {signal: ctx.signal}), api("/v1/endpoints", {signal: ctx.signal}), about()]);
  const listed = templates.find((x) => x.id === record.templateId);
  if (!listed) return null;
  const card = h("section", {class: "card template-edit", "aria-labelledby": "template-edit"});
  const users = usersByTemplate(endpoints)[listed.id] || [];
  draw(card, await api(`/v1/templates/${encodeURIComponent(listed.id)}`, {signal: ctx.signal}), record, users, info, ctx);
  return card;
}

function draw(card, t, record, users, info, ctx, saved = null) {
  const image = h("input", {id: "tpl-image", type: "text", value: t.imageName || "", spellcheck: "false", autocomplete: "off"});
  const command = h("input", {id: "tpl-command", type: "text", value: joined(t.dockerStartCmd), spellcheck: "false", autocomplete: "off"});
  const secretEnv = Object.entries(t.secretEnv || {});
  const secrets = info.mode !== "dev" || secretEnv.length > 0; // dev mode has no Secrets
  const env = envRows([...Object.entries(t.env || {}), ...secretEnv], {secrets});
  const status = h("div", {"aria-live": "assertive"}, saved);
  const review = h("div");
  const actions = h("div", {class: "row"}, h("button", {type: "submit"}, "Review template changes"),
    h("a", {href: `#/templates/${encodeURIComponent(t.id)}`}, "Every field of the template"));
  const payload = () => ({imageName: image.value.trim(), dockerStartCmd: words(command.value), ...env.variables()});
  const form = h("form", {novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    const changes = templateDiff(t, payload());
    replace(status);
    if (!changes.length) return replace(status, h("p", {class: "hint"}, "Nothing changed."));
    actions.hidden = true;
    replace(review, await confirm(t, changes, record, users, ctx, {
      saved: (next) => draw(card, next, record, users, info, ctx,
        h("p", {class: "ok"}, `Saved template ${t.name}: ${changes.map((c) => c.field).join(", ")}.`)),
      failed: (err) => {
        replace(review);
        actions.hidden = false;
        replace(status, formErrors(form, err)); // every problem, in the form's labels
      },
      back: () => { replace(review); actions.hidden = false; },
    }));
    review.querySelector("h3")?.focus();
  }},
  h("div", {class: "grid"},
    h("div", {class: "field", dataset: {field: "imageName"}}, h("label", {for: "tpl-image"}, "Container image"), image),
    h("div", {class: "field", dataset: {field: "dockerStartCmd"}}, h("label", {for: "tpl-command"}, "Start command"), command,
      h("p", {class: "hint"}, "Split into words like a shell would (quotes group words)."))),
  h("fieldset", {dataset: {field: "env"}}, h("legend", {}, "Environment variables"),
    secrets ? null : h("p", {class: "hint dev-mode-note"}, DEV_SECRETS_NOTE), env.element),
  info.mode === "dev" ? h("p", {class: "hint"}, DEV_IMAGE_NOTE) : null,
  status, review, actions);
  replace(card, h("h2", {id: "template-edit"}, `Template: ${t.name}`),
    h("p", {class: "hint"}, users.length > 1
      ? `Shared by ${users.length} endpoints (${users.join(", ")}): a change reaches every one.`
      : "Used by this endpoint only."),
    form);
}

/** The diff, and which workers restart, with Save and Back. */
async function confirm(t, changes, record, users, ctx, {saved, failed, back}) {
  let mine = [];
  try {
    mine = (await api(`/v2/serverless/${encodeURIComponent(record.id)}/workers`, {signal: ctx.signal})).workers.map((w) => w.id);
  } catch (err) {
    if (err.name === "AbortError") throw err;
  }
  const others = users.filter((u) => u !== record.id);
  const save = h("button", {type: "button", class: "primary", onclick: async () => {
    save.disabled = true;
    const body = Object.fromEntries(changes.map((c) => [c.field, c.to]));
    try {
      saved(await api(`/v1/templates/${encodeURIComponent(t.id)}`, {method: "PATCH", body, signal: ctx.signal}));
      toast(`Saved ${t.name}`);
    } catch (err) {
      if (err.name !== "AbortError") failed(err);
    }
  }}, "Save template");
  return h("section", {class: "review", "aria-labelledby": "template-review-title",
    onkeydown: (event) => { if (event.key === "Escape") back(); }},
    h("h3", {id: "template-review-title", tabindex: "-1"}, "Template changes to save"),
    h("div", {class: "table-wrap"}, h("table", {class: "diff"},
      h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Field"), h("th", {scope: "col"}, "Now"), h("th", {scope: "col"}, "After saving"))),
      h("tbody", {}, changes.map((c) => h("tr", {},
        h("th", {scope: "row"}, h("code", {}, c.field)), h("td", {class: "old"}, valueText(c.field, c.from)), h("td", {class: "new"}, valueText(c.field, c.to))))))),
    h("div", {class: "warning workers-restart", role: "note"},
      "Workers restart: the template is part of each endpoint's release, so saving makes a new version. ",
      mine.length ? `${record.id}'s worker${mine.length === 1 ? "" : "s"} ${mine.join(", ")} restart`
        : `${record.id} runs no worker now; the next ones start with the change`,
      others.length ? `; so do the workers of ${others.join(", ")}` : "",
      ". Idle workers are replaced at once; a busy one finishes its job first."),
    h("div", {class: "row"}, save, h("button", {type: "button", onclick: back}, "Back")));
}
