// The worker Template of a cluster endpoint, as a manifest to `kubectl apply`: image, start
// command, env, ports, disk size and model URL are Template settings (docs/endpoint-reference.md
// "Template spec"), which the management API does not write. The console builds the
// manifest (JSON is YAML) for the person to apply; it calls no API.
import {copyButton, h, replace} from "../dom.js";

export const TEMPLATE_API_VERSION = "lockgate.dev/v1alpha1";

/** Split a start command like a shell would (quotes group words), for `command`. */
export function words(text) {
  const out = [];
  const re = /"((?:\\.|[^"\\])*)"|'([^']*)'|(\S+)/g;
  let m;
  while ((m = re.exec(text))) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, "$1") : m[2] ?? m[3]);
  return out;
}

/** The Template manifest for the given settings (empty settings are left out). */
export function manifest({name, image, command, env, ports, disk, modelUrl}) {
  const spec = {image};
  if (command.trim()) spec.command = words(command);
  const vars = Object.fromEntries(env.filter(([k]) => k.trim()).map(([k, v]) => [k.trim(), v]));
  if (Object.keys(vars).length) spec.env = vars;
  const portList = ports.split(",").map((p) => p.trim()).filter(Boolean);
  if (portList.length) spec.ports = portList;
  if (disk !== "" && Number(disk) !== 20) spec.containerDiskInGb = Number(disk);
  if (modelUrl.trim()) spec.modelUrl = modelUrl.trim();
  return {apiVersion: TEMPLATE_API_VERSION, kind: "Template", metadata: {name}, spec};
}

function envRows() {
  const rows = h("div", {class: "env-rows"});
  let n = 0;
  const add = (focus = true) => {
    const i = n++;
    const key = h("input", {type: "text", id: `env-key-${i}`, class: "env-key", spellcheck: "false", autocomplete: "off"});
    const value = h("input", {type: "text", id: `env-value-${i}`, class: "env-value", spellcheck: "false", autocomplete: "off"});
    const row = h("div", {class: "env-row"},
      h("div", {}, h("label", {for: key.id}, `Variable ${i + 1} name`), key),
      h("div", {}, h("label", {for: value.id}, `Variable ${i + 1} value`), value),
      h("button", {type: "button", class: "small", "aria-label": `Remove variable ${i + 1}`,
        onclick: () => { row.remove(); rows.dispatchEvent(new Event("input", {bubbles: true})); }}, "Remove"));
    rows.append(row);
    if (focus) key.focus();
  };
  add(false);
  const pairs = () => [...rows.querySelectorAll(".env-row")]
    .map((r) => [r.querySelector(".env-key").value, r.querySelector(".env-value").value]);
  return {element: h("div", {}, rows, h("button", {type: "button", onclick: () => add()}, "Add variable")), pairs};
}

/**
 * A collapsed section that builds a Template manifest; `use(name)` puts the Template's
 * name into the templateId field.
 */
export function templateBuilder(use) {
  const input = (id, attrs = {}) => h("input", {id, name: id, type: "text", spellcheck: "false", autocomplete: "off", ...attrs});
  const name = input("tpl-name", {placeholder: "my-model"});
  const image = input("tpl-image", {placeholder: "registry.example.com/worker:1.0"});
  const command = input("tpl-command", {placeholder: "python -u handler.py"});
  const ports = input("tpl-ports", {placeholder: "8000/http, 22/tcp"});
  const disk = h("input", {id: "tpl-disk", name: "tpl-disk", type: "number", min: 1, max: 10000, value: 20});
  const modelUrl = input("tpl-model", {placeholder: "https://…/model.safetensors"});
  const env = envRows();
  const out = h("div", {"aria-live": "polite"});
  const field = (el, label) => h("div", {class: "field"}, h("label", {for: el.id}, label), el);
  const update = () => {
    const doc = manifest({name: name.value.trim(), image: image.value.trim(), command: command.value,
      env: env.pairs(), ports: ports.value, disk: disk.value, modelUrl: modelUrl.value});
    const text = JSON.stringify(doc, null, 2);
    replace(out, h("pre", {class: "manifest", "aria-label": "Template manifest"}, text),
      h("div", {class: "row"}, copyButton(text, "Copy manifest"),
        h("span", {class: "hint"}, "then: kubectl apply -n <endpoint namespace> -f template.yaml")));
  };
  const section = h("details", {class: "template", oninput: update},
    h("summary", {}, "Template for a cluster: image, start command, env, ports, disk, model URL"),
    h("p", {class: "hint"}, "On a cluster these are settings of a Template resource, which the management API does not write: fill them in, copy the manifest, apply it with kubectl, and use its name as the templateId. Dev mode has no Templates."),
    h("div", {class: "grid"}, field(name, "Template name"), field(image, "Container image"),
      field(command, "Start command"), field(disk, "Container disk (GiB)"),
      field(ports, "Ports"), field(modelUrl, "Model URL")),
    h("fieldset", {}, h("legend", {}, "Environment variables"), env.element),
    h("div", {class: "row"}, h("button", {type: "button", onclick: () => use(name.value.trim())}, "Use this name as templateId")),
    out);
  update();
  return section;
}
