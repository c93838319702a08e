// Where a new endpoint's workers come from (the Create page): an existing template (or, in
// dev mode, a handler file or command) by its templateId, or a container image, from which
// Create makes a template through POST /v1/templates first (RunPod's field names).
import {DEV_IMAGE_NOTE, api} from "../api.js";
import {h, replace} from "../dom.js";

/** Split a start command like a shell would (quotes group words), for `command`. */
export function words(text) {
  const out = [];
  const re = /"((?:\\.|[^"\\])*)"|'([^']*)'|(\S+)/g;
  let m;
  while ((m = re.exec(text))) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, "$1") : m[2] ?? m[3]);
  return out;
}

export const SECRET = "secret";  // an env row whose value is a Secret's key ("name/key")
export const DEV_SECRETS_NOTE = "Secret references are read from Kubernetes Secrets on a cluster; dev mode has none, so plain values only.";

/**
 * Rows for environment variables: {element, variables()}. A row is a plain value
 * or, with `secrets`, a Secret's key written "secret-name/key" (the Template's `secretEnv`).
 * `initial`: [[name, value]] and, for Secret rows, [[name, {name, key}]].
 */
export function envRows(initial = [], {secrets = false} = {}) {
  const rows = h("div", {class: "env-rows", dataset: {field: "secretEnv"}});
  let n = 0;
  const add = (focus = true, [k, v] = ["", ""]) => {
    const i = n++;
    const fromSecret = typeof v === "object" && v !== null;
    const key = h("input", {type: "text", id: `env-key-${i}`, class: "env-key", spellcheck: "false", autocomplete: "off", value: k});
    const value = h("input", {type: "text", id: `env-value-${i}`, class: "env-value", spellcheck: "false", autocomplete: "off",
      value: fromSecret ? `${v.name}/${v.key}` : v});
    const valueLabel = h("label", {for: value.id});
    const source = h("select", {id: `env-source-${i}`, class: "env-source"},
      h("option", {value: ""}, "value"), h("option", {value: SECRET, selected: fromSecret}, "Secret key"));
    const relabel = () => {
      const secret = source.value === SECRET;
      valueLabel.textContent = secret ? `Variable ${i + 1} Secret/key` : `Variable ${i + 1} value`;
      value.placeholder = secret ? "secret-name/key" : "";
    };
    source.addEventListener("change", relabel);
    relabel();
    const row = h("div", {class: `env-row${secrets ? " with-source" : ""}`},
      h("div", {}, h("label", {for: key.id}, `Variable ${i + 1} name`), key),
      secrets ? h("div", {}, h("label", {for: source.id}, `Variable ${i + 1} from`), source) : null,
      h("div", {}, valueLabel, value),
      h("button", {type: "button", class: "small", "aria-label": `Remove variable ${i + 1}`,
        onclick: () => { row.remove(); rows.dispatchEvent(new Event("input", {bubbles: true})); }}, "Remove"));
    rows.append(row);
    if (focus) key.focus();
  };
  if (initial.length) initial.forEach((pair) => add(false, pair));
  else add(false);
  const read = () => [...rows.querySelectorAll(".env-row")].map((r) => [
    r.querySelector(".env-key").value.trim(), r.querySelector(".env-value").value,
    r.querySelector(".env-source")?.value === SECRET]).filter(([k]) => k);
  /** {env, secretEnv}: plain values, and Secret keys ("name/key" split at its first /). */
  const variables = () => {
    const env = {}, secretEnv = {};
    for (const [k, v, secret] of read()) {
      if (!secret) { env[k] = v; continue; }
      const [name, ...rest] = v.trim().split("/");
      secretEnv[k] = {name, key: rest.join("/")};
    }
    return {env, secretEnv};
  };
  return {element: h("div", {}, rows, h("button", {type: "button", onclick: () => add()}, "Add variable")), variables};
}


const NONE = "";

/** The template payload (POST /v1/templates) for the image settings the inputs say;
 * `env` and `secretEnv` as `envRows(…).variables()` gives them. */
export function templatePayload({name, imageName, dockerStartCmd, dockerEntrypoint, ports, env, secretEnv, containerDiskInGb, containerRegistryAuthId}) {
  const out = {name, imageName: imageName.trim(), isServerless: true};
  out.dockerStartCmd = words(dockerStartCmd);
  out.dockerEntrypoint = words(dockerEntrypoint);
  out.ports = ports.split(",").map((p) => p.trim()).filter(Boolean);
  out.env = env;
  if (Object.keys(secretEnv).length) out.secretEnv = secretEnv;
  out.containerDiskInGb = containerDiskInGb === "" ? containerDiskInGb : Number(containerDiskInGb);
  if (containerRegistryAuthId) out.containerRegistryAuthId = containerRegistryAuthId;
  return out;
}

/**
 * A select of `path`'s records (GET list) with "none" first; filled when the list comes.
 * `selected` (an id) is chosen from the start, so a form sent before the list comes keeps it;
 * one the list does not have stays, marked "not found".
 */
function listSelect(id, path, label, selected = NONE) {
  const select = h("select", {id, name: id}, h("option", {value: NONE}, "none"));
  const current = selected ? h("option", {value: selected, selected: true}, selected) : null;
  if (current) select.append(current);
  api(path).then((items) => {
    for (const item of items) {
      if (item.id === selected) replace(current, label(item));
      else select.append(h("option", {value: item.id}, label(item)));
    }
    if (current && !items.some((item) => item.id === selected)) replace(current, `${selected} (not found)`);
  }).catch((err) => {
    select.append(h("option", {value: NONE, disabled: true}, `cannot list: ${err.message}`));
  });
  return select;
}

/** The registry credential select (GET /v1/containerregistryauth, "none" first): its name,
 * user and registry, never a password. */
export function credentialSelect(selected = NONE) {
  return listSelect("containerRegistryAuthId", "/v1/containerregistryauth",
    (c) => `${c.name} (${c.username}${c.registry ? ` @ ${c.registry}` : ""})`, selected);
}

/**
 * The "Worker from" choice: `templateField` (the templateId input's field) or the image
 * settings. Returns {element, image()} where image() is null when a template is chosen,
 * else {template(name): the POST /v1/templates payload, networkVolumeId}.
 */
export function workerSource(templateField, {devMode = false} = {}) {
  const input = (id, attrs = {}) => h("input", {id, name: id, type: "text", spellcheck: "false", autocomplete: "off", ...attrs});
  const inputs = {
    imageName: input("imageName", {placeholder: "registry.example.com/worker:1.0"}),
    dockerStartCmd: input("dockerStartCmd", {placeholder: "python -u handler.py"}),
    dockerEntrypoint: input("dockerEntrypoint", {placeholder: "empty: the image's own"}),
    ports: input("ports", {placeholder: "8000/http, 22/tcp"}),
    containerDiskInGb: h("input", {id: "containerDiskInGb", name: "containerDiskInGb", type: "number", inputmode: "numeric", min: 1, max: 10000, value: 50}),
    containerRegistryAuthId: credentialSelect(),
    networkVolumeId: listSelect("networkVolumeId", "/v1/networkvolumes", (v) => `${v.name} (${v.size} GiB)`),
  };
  const env = envRows([], {secrets: !devMode});
  const field = (el, label, hint) => {
    if (hint) el.setAttribute("aria-describedby", `${el.id}-hint`);
    return h("div", {class: "field", dataset: {field: el.id}}, h("label", {for: el.id}, label), el,
      hint ? h("p", {class: "hint", id: `${el.id}-hint`}, hint) : null);
  };
  const radios = [["template", "An existing template"], ["image", "A container image"]].map(([value, label]) =>
    [h("input", {type: "radio", name: "source", value, id: `source-${value}`, checked: value === "template"}), label]);
  const imageFields = h("div", {class: "image-source"},
    devMode ? h("p", {class: "hint dev-mode-note"}, DEV_IMAGE_NOTE) : null,
    h("div", {class: "grid"},
      field(inputs.imageName, "Container image"),
      field(inputs.dockerStartCmd, "Start command", "Split into words like a shell would (quotes group words)."),
      field(inputs.dockerEntrypoint, "Entrypoint (optional)"),
      field(inputs.ports, "HTTP ports", "Comma-separated, e.g. 8000/http"),
      field(inputs.containerDiskInGb, "Container disk (GiB)"),
      field(inputs.containerRegistryAuthId, "Registry credential"),
      field(inputs.networkVolumeId, "Network volume", "Mounted at /runpod-volume in every worker.")),
    h("fieldset", {dataset: {field: "env"}}, h("legend", {}, "Environment variables"),
      devMode ? h("p", {class: "hint dev-mode-note"}, DEV_SECRETS_NOTE) : null, env.element));
  const chosen = () => radios.find(([r]) => r.checked)[0].value;
  const apply = () => {
    imageFields.hidden = chosen() !== "image";
    templateField.hidden = chosen() === "image";
  };
  radios.forEach(([r]) => r.addEventListener("change", apply));
  apply();
  const element = h("div", {},
    h("fieldset", {class: "choice"}, h("legend", {}, "Worker from"),
      radios.map(([r, label]) => h("label", {class: "inline", for: r.id}, r, label))),
    templateField, imageFields);
  const image = () => chosen() !== "image" ? null : {
    template: (name) => templatePayload({name, ...env.variables(),
      containerRegistryAuthId: inputs.containerRegistryAuthId.value,
      ...Object.fromEntries(["imageName", "dockerStartCmd", "dockerEntrypoint", "ports", "containerDiskInGb"].map((k) => [k, inputs[k].value]))}),
    networkVolumeId: inputs.networkVolumeId.value || null,
  };
  return {element, image};
}
