// The Registry credentials (#/credentials, /v1/containerregistryauth) and Network volumes
// (#/volumes, /v1/networkvolumes) pages: list, create, delete with confirmation. One page
// shape for both; a credential's password is sent once and never shown (the API never
// returns it).
import {api} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";
import {formErrors, markInvalid} from "./form.js";

/**
 * A list-create-delete page for the REST collection `path`. `columns`: [[label, record ->
 * text]]; `fields`: [[name, label, attrs, hint]] of the create form (attrs.type "number"
 * sends a number; empty optional fields are left out).
 */
function resourcePage({title, path, noun, intro, columns, fields}) {
  return async function render(view, ctx) {
    const list = h("div");
    const refresh = async () => {
      const items = await api(path, {signal: ctx.signal});
      replace(list, items.length ? table(items) : h("p", {class: "hint"}, `No ${noun}.`));
    };
    const table = (items) => h("div", {class: "table-wrap"}, h("table", {class: "keys", "aria-label": title},
      h("thead", {}, h("tr", {}, [...columns.map(([label]) => label), "Id", ""].map((c) => h("th", {scope: "col"}, c)))),
      h("tbody", {}, items.map((item) => h("tr", {dataset: {id: item.id}},
        columns.map(([label, cell]) => h("td", {"data-label": label}, cell(item) ?? "—")),
        h("td", {"data-label": "Id"}, h("code", {}, item.id)),
        h("td", {"data-label": ""}, deleteCell(item)))))));
    const deleteCell = (item) => {
      const cell = h("div", {class: "row"});
      const start = h("button", {type: "button", class: "danger small", "aria-label": `Delete ${item.name}`, onclick: () => {
        const yes = h("button", {type: "button", class: "danger", onclick: async () => {
          try {
            await api(`${path}/${encodeURIComponent(item.id)}`, {method: "DELETE", signal: ctx.signal});
            toast(`Deleted ${item.name}`);
            await refresh();
          } catch (err) {
            if (err.name !== "AbortError") replace(cell, errorBox(err), start);
          }
        }}, `Delete ${item.name}`);
        const no = h("button", {type: "button", onclick: () => { replace(cell, start); start.focus(); }}, "Cancel");
        cell.onkeydown = (event) => { if (event.key === "Escape") no.click(); }; // as Revoke does
        replace(cell, h("span", {role: "alert", class: "confirm"}, "Delete?"), yes, no);
        no.focus();
      }}, "Delete");
      replace(cell, start);
      return cell;
    };
    const inputs = Object.fromEntries(fields.map(([name, , attrs]) =>
      [name, h("input", {id: name, name, type: "text", autocomplete: "off", spellcheck: "false", ...attrs})]));
    const status = h("div", {"aria-live": "assertive"});
    const form = h("form", {class: "card", novalidate: true, onsubmit: async (event) => {
      event.preventDefault();
      const body = {};
      for (const [name, input] of Object.entries(inputs)) {
        const value = input.type === "password" ? input.value : input.value.trim();
        if (value === "" && input.dataset.optional) continue;
        body[name] = input.type === "number" && value !== "" ? Number(value) : value;
      }
      try {
        const made = await api(path, {method: "POST", body, signal: ctx.signal});
        form.reset();
        markInvalid(form, "");
        replace(status);
        toast(`Created ${made.name}`);
        await refresh();
      } catch (err) {
        if (err.name === "AbortError") return;
        replace(status, formErrors(form, err));
      }
    }},
    h("h2", {}, `Create a ${noun}`),
    h("div", {class: "grid"}, fields.map(([name, label, , hint]) => h("div", {class: "field", dataset: {field: name}},
      h("label", {for: name}, label), inputs[name], hint ? h("p", {class: "hint"}, hint) : null))),
    status, h("button", {type: "submit", class: "primary"}, `Create ${noun}`));
    replace(view, h("h1", {}, title), h("p", {class: "hint"}, intro), form, h("h2", {}, title), list);
    await refresh();
  };
}

export const credentials = resourcePage({
  title: "Registry credentials", path: "/v1/containerregistryauth", noun: "registry credential",
  intro: "A user name and password (or token) for a private registry, used to pull a template's "
    + "image (its containerRegistryAuthId). On a cluster it is a docker-registry Secret; the "
    + "password is never shown again, and there is no edit: delete and create again.",
  columns: [["Name", (c) => c.name], ["User", (c) => c.username], ["Registry", (c) => c.registry]],
  fields: [
    ["name", "Name", {}],
    ["username", "User name", {}],
    ["password", "Password or token", {type: "password", autocomplete: "new-password"}],
    ["registry", "Registry (optional)", {placeholder: "ghcr.io", "data-optional": "1"}, "Empty: the image's own registry host."],
  ],
});

export const volumes = resourcePage({
  title: "Network volumes", path: "/v1/networkvolumes", noun: "network volume",
  intro: "Storage mounted at /runpod-volume in every worker of the endpoints that name it "
    + "(networkVolumeId). On a cluster a PersistentVolumeClaim; in lockgate dev a folder "
    + "under the data directory. Deleting one deletes its files.",
  columns: [["Name", (v) => v.name], ["Size", (v) => `${v.size} GiB`], ["Data centre", (v) => v.dataCenterId]],
  fields: [
    ["name", "Name", {}],
    ["size", "Size (GiB)", {type: "number", inputmode: "numeric", min: 1}],
    ["dataCenterId", "Data centre (optional)", {"data-optional": "1"}],
  ],
});
