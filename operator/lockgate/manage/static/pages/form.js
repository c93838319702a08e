// The endpoint settings form shared by Create and Edit: every field of the creation payload
// (models/endpoint.py EndpointSpec), the payload it makes, and the diff of an edit.
import {DEV_MODE_NOTE} from "../api.js";
import {h, replace} from "../dom.js";
import {typeChoice} from "./lb.js";
import {shownSource, sourceFields} from "./source.js";
import {workerSource} from "./template.js";

// Fields whose change restarts workers. Dev mode: a new templateId replaces the worker
// processes (dev/controlplane.py LocalControlPlane.patch). Kubernetes: these change the worker
// pod template (kube/manifests.py: placement, resources, image pull policy, grace period),
// so the Deployment rolls its pods; the other settings are annotations read by the scaler.
// modelReferences: dev mode replaces the workers once the models are cached (controlplane._apply).
export const RESTARTS_EVERYWHERE = ["templateId", "modelReferences"];
export const RESTARTS_ON_KUBERNETES = [
  "computeType", "gpuTypeIds", "gpuCount", "cpuFlavorIds", "vcpuCount", "allowedCudaVersions",
  "dataCenterIds", "executionTimeoutMs", "flashboot", "requestTimeoutS",
];

const NUMBERS = ["gpuCount", "vcpuCount", "workersMin", "workersMax", "idleTimeout",
  "executionTimeoutMs", "scalerValue"];
const LISTS = ["cpuFlavorIds", "allowedCudaVersions", "dataCenterIds"];
export const FIELDS = ["name", "computeType", "gpuTypeIds", "gpuCount", "cpuFlavorIds",
  "vcpuCount", "allowedCudaVersions", "dataCenterIds", "templateId", "executionTimeoutMs",
  "flashboot", "idleTimeout", "scalerType", "scalerValue", "workersMin", "workersMax",
  "type", "requestTimeoutS", "lbHoldS", "modelReferences", "source"];

const DEFAULTS = {
  name: "", computeType: "GPU", gpuTypeIds: [], gpuCount: 1, cpuFlavorIds: [], vcpuCount: 2,
  allowedCudaVersions: [], dataCenterIds: [], templateId: "", executionTimeoutMs: 600000,
  flashboot: false, idleTimeout: 5, scalerType: "QUEUE_DELAY", scalerValue: 4, workersMin: 0,
  workersMax: 3, modelReferences: [], source: null,
};

/** Old -> new of every field that differs: [{field, from, to}]. */
export function diff(before, after) {
  return FIELDS.filter((f) => f in after && JSON.stringify(before[f]) !== JSON.stringify(after[f]))
    .map((f) => ({field: f, from: before[f], to: after[f]}));
}

/** What a set of changes does to running workers: [{field, where}]. */
export function restarts(changes) {
  return changes.flatMap(({field}) => {
    if (RESTARTS_EVERYWHERE.includes(field)) return [{field, where: "everywhere"}];
    if (RESTARTS_ON_KUBERNETES.includes(field)) return [{field, where: "kubernetes"}];
    return [];
  });
}

/** The Model field's text as `modelReferences`: one per line or comma separated. */
export function modelList(text) {
  return text.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
}

/** A value as the diff shows it. */
export function shown(value) {
  if (Array.isArray(value)) return value.length ? value.join(", ") : "(none)";
  if (value?.git) return shownSource(value);
  if (value === "" || value === undefined || value === null) return "(empty)";
  return String(value);
}

function field(id, label, input, hint) {
  input.id = id;
  input.name = id;
  if (hint) input.setAttribute("aria-describedby", `${id}-hint`);
  return h("div", {class: "field", dataset: {field: id}},
    h("label", {for: id}, label), input,
    hint ? h("p", {class: "hint", id: `${id}-hint`}, hint) : null);
}

const number = (value, min, max) => h("input", {type: "number", inputmode: "numeric", min, max, value});
const text = (value, extra = {}) => h("input", {type: "text", value: value ?? "", ...extra});

/** The ordered GPU types editor: a list with up/down/remove buttons and an add box. */
function gpuList(initial) {
  const types = [...initial];
  const list = h("ol", {class: "gpu-list", "aria-label": "GPU types, most preferred first"});
  const input = h("input", {type: "text", id: "gpuType", placeholder: "NVIDIA L4"});
  const render = (focusIndex, focusWhat) => {
    replace(list, types.map((type, i) => h("li", {},
      h("span", {class: "grow"}, `${i + 1}. ${type}`),
      h("button", {type: "button", class: "small", "aria-label": `Move ${type} up`,
        disabled: i === 0, dataset: {move: "up"}, onclick: () => move(i, -1)}, "↑"),
      h("button", {type: "button", class: "small", "aria-label": `Move ${type} down`,
        disabled: i === types.length - 1, dataset: {move: "down"}, onclick: () => move(i, 1)}, "↓"),
      h("button", {type: "button", class: "small", "aria-label": `Remove ${type}`,
        onclick: () => { types.splice(i, 1); render(); input.focus(); }}, "Remove"))));
    if (focusIndex !== undefined) {
      const target = list.children[focusIndex]?.querySelector(`[data-move="${focusWhat}"]:not([disabled])`)
        || list.children[focusIndex]?.querySelector("button:not([disabled])");
      target?.focus();
    }
  };
  const move = (i, by) => {
    [types[i], types[i + by]] = [types[i + by], types[i]];
    render(i + by, by < 0 ? "up" : "down");
  };
  const add = () => {
    const value = input.value.trim();
    if (value && !types.includes(value)) types.push(value);
    input.value = "";
    render();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); add(); }
  });
  render();
  const element = h("div", {class: "field", dataset: {field: "gpuTypeIds"}},
    h("label", {for: "gpuType"}, "GPU types, in priority order"),
    list,
    h("div", {class: "row"}, h("div", {class: "grow"}, input),
      h("button", {type: "button", onclick: add}, "Add GPU type")),
    h("p", {class: "hint"}, "Workers use the first type with free capacity; the next one when it has none."));
  return {element, value: () => [...types]};
}

/**
 * The settings form. `initial`: a record (Edit) or nothing (Create). Returns
 * {element, payload(), image()}: payload() is the creation payload the inputs say; image() is
 * null, or (Create, "A container image") the template to make first (template.js workerSource).
 */
export function endpointForm(initial = {}, {withId = true, devMode = false} = {}) {
  const v = {...DEFAULTS, ...initial};
  const inputs = {
    name: text(v.name, {maxlength: 191}),
    computeType: h("select", {}, ["GPU", "CPU"].map((c) => h("option", {value: c, selected: v.computeType === c}, c))),
    gpuCount: number(v.gpuCount, 0, 16),
    cpuFlavorIds: text(v.cpuFlavorIds.join(", ")),
    vcpuCount: number(v.vcpuCount, 1, 512),
    allowedCudaVersions: text(v.allowedCudaVersions.join(", ")),
    dataCenterIds: text(v.dataCenterIds.join(", ")),
    templateId: text(v.templateId, {placeholder: "examples/echo/handler.py", spellcheck: "false"}),
    executionTimeoutMs: number(v.executionTimeoutMs / 1000, 5, 604800), // shown in s, sent in ms
    flashboot: h("input", {type: "checkbox", checked: v.flashboot}),
    idleTimeout: number(v.idleTimeout, 0, 3600),
    scalerType: h("select", {}, [["QUEUE_DELAY", "Queue delay"], ["REQUEST_COUNT", "Request count"]]
      .map(([value, label]) => h("option", {value, selected: v.scalerType === value}, label))),
    scalerValue: number(v.scalerValue, 1, 10000),
    workersMin: number(v.workersMin, 0, 1000),
    workersMax: number(v.workersMax, 0, 1000),
    modelReferences: h("textarea", {rows: 3, spellcheck: "false", autocomplete: "off",
      placeholder: "org/name or org/name:revision"}, v.modelReferences.join("\n")),
  };
  const kind = typeChoice(v, inputs.scalerType, {editable: withId});
  const id = withId ? text(initial.id || "", {placeholder: "generated when empty", spellcheck: "false", autocomplete: "off"}) : null;
  const templateField = field("templateId", "Template, handler file or command", inputs.templateId,
    "A template's id (Templates page, /v1/templates). With lockgate dev also a handler file (*.py) or a worker command.");
  // Create offers an image instead of a template; Edit changes the templateId only
  const source = withId ? workerSource(templateField, {devMode}) : {element: templateField, image: () => null};
  const git = sourceFields(v.source, {devMode});
  const gpus = gpuList(v.gpuTypeIds);
  const gpuOnly = h("div", {class: "grid"}, gpus.element,
    field("gpuCount", "GPUs per worker", inputs.gpuCount),
    field("allowedCudaVersions", "CUDA versions (lowest accepted)", inputs.allowedCudaVersions, "Comma-separated, e.g. 12.4"));
  const cpuOnly = h("div", {class: "grid"},
    field("cpuFlavorIds", "CPU flavours", inputs.cpuFlavorIds, "Comma-separated"));
  const showCompute = () => {
    gpuOnly.hidden = inputs.computeType.value !== "GPU";
    cpuOnly.hidden = inputs.computeType.value !== "CPU";
  };
  inputs.computeType.addEventListener("change", showCompute);
  showCompute();

  const element = h("div", {class: "settings"},
    h("fieldset", {}, h("legend", {}, "Endpoint"),
      h("div", {class: "grid"},
        withId ? field("id", "Endpoint id", id, "Lowercase letters, digits and '-'; it is in the job API URL.") : null,
        field("name", "Name", inputs.name)),
      kind.element),
    h("fieldset", {}, h("legend", {}, "Worker"),
      git.element,
      source.element,
      field("modelReferences", "Model", inputs.modelReferences,
        "Hugging Face models, one per line (or comma separated): org/name or org/name:revision. Downloaded once before workers start."),
      placement(devMode,
        h("div", {class: "grid"},
          field("computeType", "Compute", inputs.computeType),
          field("vcpuCount", "vCPUs per worker", inputs.vcpuCount)),
        gpuOnly, cpuOnly,
        field("dataCenterIds", "Data centres", inputs.dataCenterIds, "Comma-separated zones; empty: any"),
        h("label", {class: "inline", for: "flashboot"}, inputs.flashboot, " FlashBoot (pre-pull the image on eligible nodes)"))),
    h("fieldset", {}, h("legend", {}, "Scaling"),
      h("div", {class: "grid"},
        field("workersMin", "Workers min", inputs.workersMin),
        field("workersMax", "Workers max", inputs.workersMax),
        field("idleTimeout", "Idle timeout (s)", inputs.idleTimeout),
        field("executionTimeoutMs", "Execution timeout (s)", inputs.executionTimeoutMs),
        field("scalerType", "Scaler", inputs.scalerType),
        field("scalerValue", "Scaler value", inputs.scalerValue, "Queue delay: seconds; request count: jobs (LB: requests) per worker"))),
    kind.lbFields);
  inputs.flashboot.id = "flashboot";

  const payload = () => {
    const out = {};
    for (const [name, input] of Object.entries(inputs)) {
      if (name === "flashboot") out[name] = input.checked;
      else if (name === "executionTimeoutMs") out[name] = input.value === "" ? input.value : Math.round(Number(input.value) * 1000);
      else if (NUMBERS.includes(name)) out[name] = input.value === "" ? input.value : Number(input.value);
      else if (name === "modelReferences") out[name] = modelList(input.value);
      else if (LISTS.includes(name)) out[name] = input.value.split(",").map((s) => s.trim()).filter(Boolean);
      else out[name] = input.value.trim();
    }
    out.gpuTypeIds = gpus.value();
    out.source = git.value();
    if (withId && id.value.trim()) out.id = id.value.trim();
    return {...out, ...kind.payload()};
  };
  return {element, payload, image: source.image};
}

/** Compute, GPU, CUDA, data centres and FlashBoot: in dev mode folded away under a summary
 * that says they are not used (kept for a cluster), else shown as they are. */
function placement(devMode, ...fields) {
  if (!devMode) return h("div", {class: "placement"}, fields);
  return h("details", {class: "placement dev-mode"},
    h("summary", {}, "Compute, GPU, CUDA, data centres, FlashBoot: not used in dev mode"),
    h("p", {class: "hint dev-mode-note"}, DEV_MODE_NOTE), fields);
}

/** Mark the input an API error names ("workersMax: ..." names workersMax, "ports.0: ..."
 * names ports) and show the message under that field. */
export function markInvalid(form, message) {
  form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
  form.querySelectorAll(".field-error").forEach((el) => el.remove());
  const name = String(message).split(/[:. (]/)[0];
  const input = form.querySelector(`[name="${CSS.escape(name)}"]`);
  if (input) input.setAttribute("aria-invalid", "true");
  const place = form.querySelector(`[data-field="${CSS.escape(name)}"]`);
  if (place && !place.hidden) place.append(h("p", {class: "field-error"}, message));
}
