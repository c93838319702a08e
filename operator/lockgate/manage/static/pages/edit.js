// The Edit page (#/endpoints/{id}/edit): the settings form filled in; Save shows the diff
// (old -> new) and which changes restart workers before PATCH /v1/endpoints/{id}; its template's
// image, command and env are edited below it (pages/templateedit.js). Delete
// (type the endpoint's name to confirm) is at the bottom.
import {about, api, commandLineNote} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";
import {diff, endpointForm, markInvalid, restarts, shown} from "./form.js";
import {templateEditor} from "./templateedit.js";

const path = (id) => `/v1/endpoints/${encodeURIComponent(id)}`;

export async function render(view, ctx) {
  const [record, info] = await Promise.all([api(path(ctx.params.id), {signal: ctx.signal}), about()]);
  const editor = h("div");
  const note = commandLineNote(info, record.id);
  const template = h("div"); // filled when /v1/templates answers: the form does not wait for it
  replace(view, note ? h("div", {class: "warning command-line-note", role: "note"}, note) : null,
    editor, template, deletion(record, ctx));
  templateEditor(record, ctx).then((card) => replace(template, card))
    .catch((err) => { if (err.name !== "AbortError") replace(template, errorBox(err)); });
  edit(editor, record, ctx, {devMode: info.mode === "dev"});
}

function edit(editor, record, ctx, {devMode, saved = null}) {
  const {element, payload} = endpointForm(record, {withId: false, devMode});
  const status = h("div", {"aria-live": "assertive"}, saved);
  const review = h("div");
  const actions = h("div", {class: "row"}, h("button", {type: "submit", class: "primary"}, "Review changes"));
  const form = h("form", {class: "card", novalidate: true, onsubmit: (event) => {
    event.preventDefault();
    const changes = diff(record, payload());
    replace(status);
    if (!changes.length) return replace(status, h("p", {class: "hint"}, "Nothing changed."));
    actions.hidden = true;
    replace(review, confirm(record, changes, ctx, {
      saved: (next) => edit(editor, next, ctx, {devMode, saved: h("p", {class: "ok"}, `Saved: ${summary(changes)}.`)}),
      failed: (err) => {
        replace(review);
        actions.hidden = false;
        replace(status, errorBox(err));
        markInvalid(form, err.message);
      },
      back: () => { replace(review); actions.hidden = false; actions.querySelector("button").focus(); },
    }));
    review.querySelector("h2").focus();
  }}, h("h2", {}, "Settings"), element, status, review, actions);
  replace(editor, form);
}

function summary(changes) {
  return changes.map((c) => `${c.field} ${shown(c.from)} → ${shown(c.to)}`).join("; ");
}

/** The diff and the restart warning, with Save and Back. */
function confirm(record, changes, ctx, {saved, failed, back}) {
  const restarting = restarts(changes);
  const everywhere = restarting.filter((r) => r.where === "everywhere").map((r) => r.field);
  const onKube = restarting.filter((r) => r.where === "kubernetes").map((r) => r.field);
  const save = h("button", {type: "button", class: "primary", onclick: async () => {
    save.disabled = true;
    const body = Object.fromEntries(changes.map((c) => [c.field, c.to]));
    try {
      saved(await api(path(record.id), {method: "PATCH", body, signal: ctx.signal}));
      toast("Saved");
    } catch (err) {
      if (err.name !== "AbortError") failed(err);
    }
  }}, "Save changes");
  return h("section", {class: "review", "aria-labelledby": "review-title",
    onkeydown: (event) => { if (event.key === "Escape") back(); }},
    h("h2", {id: "review-title", tabindex: "-1"}, "Changes to save"),
    h("div", {class: "table-wrap"}, h("table", {class: "diff"},
      h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Setting"), h("th", {scope: "col"}, "Now"), h("th", {scope: "col"}, "After saving"))),
      h("tbody", {}, changes.map((c) => h("tr", {},
        h("th", {scope: "row"}, h("code", {}, c.field)), h("td", {class: "old"}, shown(c.from)), h("td", {class: "new"}, shown(c.to))))))),
    everywhere.length ? h("div", {class: "warning", role: "note"},
      `Workers restart: a new ${everywhere.join(", ")} replaces the running workers (they finish the jobs in hand first).`) : null,
    onKube.length ? h("div", {class: "warning", role: "note"},
      `On Kubernetes, workers restart: ${onKube.join(", ")} change${onKube.length === 1 ? "s" : ""} the worker pod template, so the pods roll (in dev mode they keep running).`) : null,
    !restarting.length ? h("p", {class: "hint"}, "No worker restarts: these settings apply to the running workers.") : null,
    h("div", {class: "row"}, save, h("button", {type: "button", onclick: back}, "Back")));
}

/** Delete: the button stays disabled until the endpoint's name (its id) is typed. */
function deletion(record, ctx) {
  const input = h("input", {id: "confirm-delete", type: "text", autocomplete: "off", spellcheck: "false"});
  const status = h("div", {"aria-live": "assertive"});
  const button = h("button", {type: "submit", class: "danger", disabled: true}, "Delete endpoint");
  input.addEventListener("input", () => { button.disabled = input.value.trim() !== record.id; });
  return h("form", {class: "card danger-zone", onsubmit: async (event) => {
    event.preventDefault();
    if (input.value.trim() !== record.id) return;
    button.disabled = true;
    try {
      await api(path(record.id), {method: "DELETE", signal: ctx.signal});
      toast(`Deleted ${record.id}`);
      ctx.go("#/endpoints");
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
      button.disabled = false;
    }
  }},
  h("h2", {}, "Delete this endpoint"),
  h("p", {}, "Deleting removes its configuration, its workers, its queued jobs, job history and logs. It cannot be undone."),
  h("label", {for: "confirm-delete"}, "Type ", h("code", {}, record.id), " to confirm"),
  input, status, h("div", {class: "row"}, button));
}
