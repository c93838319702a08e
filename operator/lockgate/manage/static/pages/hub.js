// Create from a ready-to-deploy repository (#/new?from=repository): the catalogue the server
// offers (GET /v1/about `catalogue`, the chart's operator.manage.console.catalogue) or any
// repository URL; the server reads its .runpod/hub.json (POST /v1/hub/inspect), and this
// page renders the form the file describes: title and description, the `config.env`
// inputs (type, default, options, min/max; advanced ones folded), the presets (choosing one
// fills the inputs), the GPU settings and the endpoint type. Create makes the endpoint
// with the repository as its git source and the variables as its env (POST
// /v2/serverless), then starts its first build (POST …/builds) and opens the Builds tab.
import {about, api, DEV_MODE_NOTE} from "../api.js";
import {errorBox, h, replace, toast} from "../dom.js";

// What the template holds until the first build completes: a name whose host never
// resolves (.invalid, RFC 2606), so a worker started before that says why it cannot pull.
export const AWAITING_BUILD_IMAGE = "lockgate.invalid/awaiting-first-build:latest";
// Dev mode runs a template's command, not its image: one that says the same and exits.
export const AWAITING_BUILD_COMMAND = `python -c "raise SystemExit('no build of this endpoint has completed yet: see its Builds tab')"`;

/** A hub input's value as the variable's text (models/hub.py env_text). */
export function envText(input, value) {
  if (typeof value === "boolean") {
    const chosen = value ? input?.trueValue : input?.falseValue;
    return chosen ?? String(value);
  }
  return String(value);
}

/** Why an input's value cannot be sent (required and empty, a number out of its bounds),
 * or null. */
export function problem(i) {
  const value = i.value();
  if (value === "" || value === null) return i.input.required ? "required" : null;
  if (i.input.type !== "number" || i.input.options) return null;
  if (Number.isNaN(value)) return "not a number";
  if (i.input.min != null && value < i.input.min) return `${value} is below ${i.input.min}`;
  if (i.input.max != null && value > i.input.max) return `${value} is above ${i.input.max}`;
  return null;
}

/** One `config.env` input as a form control: {element, key, set(value), value()}. */
function envInput(entry) {
  const input = entry.input;
  const id = `env-${entry.key}`;
  const label = input.name || entry.key;
  let control;
  if (input.options) {
    control = h("select", {id, name: entry.key}, input.options.map((o) =>
      h("option", {value: JSON.stringify(o.value)}, o.label)));
  } else if (input.type === "boolean") {
    control = h("input", {id, name: entry.key, type: "checkbox"});
  } else if (input.type === "number") {
    control = h("input", {id, name: entry.key, type: "number", step: "any", min: input.min ?? undefined, max: input.max ?? undefined});
  } else {
    control = h("input", {id, name: entry.key, type: "text", spellcheck: "false", autocomplete: "off",
      placeholder: input.type === "huggingface" ? "org/name" : null});
  }
  if (input.required) control.required = true;
  const set = (value) => {
    if (value === undefined || value === null) return;
    if (input.options) control.value = JSON.stringify(value);
    else if (input.type === "boolean") control.checked = Boolean(value);
    else control.value = String(value);
  };
  const value = () => {
    if (input.options) return JSON.parse(control.value);
    if (input.type === "boolean") return control.checked;
    if (input.type === "number") return control.value === "" ? null : Number(control.value);
    return control.value.trim();
  };
  set(input.default);
  const bounds = input.type === "number" && (input.min != null || input.max != null)
    ? ` (${input.min ?? "…"} to ${input.max ?? "…"})` : "";
  const element = input.type === "boolean"
    ? h("div", {class: "field", dataset: {field: entry.key}},
      h("label", {class: "inline", for: id}, control, ` ${label}`),
      h("p", {class: "hint"}, input.description || "", " ", h("code", {}, entry.key)))
    : h("div", {class: "field", dataset: {field: entry.key}},
      h("label", {for: id}, label, bounds), control,
      h("p", {class: "hint"}, input.description ? `${input.description} · ` : "", h("code", {}, entry.key)));
  return {element, key: entry.key, input, set, value, control};
}

export async function render(view, ctx) {
  const info = await about();
  const devMode = info.mode === "dev";
  const url = h("input", {id: "hub-url", name: "hub-url", type: "text", spellcheck: "false", autocomplete: "off",
    required: true, placeholder: devMode ? "https://…, file:///path or a local path" : "https://github.com/org/worker"});
  const ref = h("input", {id: "hub-ref", name: "hub-ref", type: "text", spellcheck: "false", autocomplete: "off",
    placeholder: "empty: the default branch"});
  const status = h("div", {"aria-live": "assertive"});
  const found = h("div");
  const readButton = h("button", {type: "submit", class: "primary"}, "Read hub.json");
  const read = async () => {
    readButton.disabled = true;
    replace(status, h("p", {class: "hint"}, "Reading the repository…"));
    replace(found);
    try {
      const hub = await api("/v1/hub/inspect", {method: "POST", body: {url: url.value.trim(), ref: ref.value.trim()}, signal: ctx.signal});
      replace(status);
      replace(found, hubForm(hub, ctx, {devMode}));
      found.querySelector("h2")?.focus();
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
    } finally {
      readButton.disabled = false;
    }
  };
  const catalogue = info.catalogue || [];
  replace(view,
    h("h1", {}, "New endpoint from a repository"),
    h("p", {}, "A ready-to-deploy repository holds ", h("code", {}, ".runpod/hub.json"), " (as RunPod Hub listings do): "
      + "it says how to deploy it. lockgate reads it, shows its settings, and creates an endpoint built from the repository. ",
      h("a", {href: "#/new"}, "Configure an endpoint by hand instead")),
    catalogue.length ? h("section", {class: "card", "aria-labelledby": "catalogue-title"},
      h("h2", {id: "catalogue-title"}, "Offered repositories"),
      h("ul", {class: "catalogue"}, catalogue.map((entry) => h("li", {},
        h("button", {type: "button", class: "link", onclick: () => {
          url.value = entry.url;
          ref.value = entry.ref || "";
          read();
        }}, entry.title || entry.url),
        " ", h("span", {class: "hint"}, entry.url, entry.ref ? ` @ ${entry.ref}` : ""))))) : null,
    h("form", {class: "card", novalidate: true, onsubmit: (event) => { event.preventDefault(); read(); }},
      h("div", {class: "grid"},
        h("div", {class: "field"}, h("label", {for: "hub-url"}, "Repository URL"), url),
        h("div", {class: "field"}, h("label", {for: "hub-ref"}, "Branch, tag or commit (optional)"), ref)),
      status, h("div", {class: "row"}, readButton)),
    found);
  if (ctx.query.get("url")) {
    url.value = ctx.query.get("url");
    ref.value = ctx.query.get("ref") || "";
    read();
  }
}

/** The form hub.json describes, and Create. */
function hubForm(found, ctx, {devMode}) {
  const hub = found.hub;
  const config = hub.config;
  const inputs = config.env.filter((e) => e.input).map(envInput);
  const fixed = config.env.filter((e) => !e.input);
  const basic = inputs.filter((i) => !i.input.advanced);
  const advanced = inputs.filter((i) => i.input.advanced);
  const defaults = () => inputs.forEach((i) => i.set(i.input.default));
  const preset = config.presets.length ? h("select", {id: "hub-preset", name: "preset"},
    h("option", {value: ""}, "None: the defaults"),
    config.presets.map((p) => h("option", {value: p.name}, p.name))) : null;
  preset?.addEventListener("change", () => {
    defaults();
    const chosen = config.presets.find((p) => p.name === preset.value);
    for (const [key, value] of Object.entries(chosen?.defaults || {})) inputs.find((i) => i.key === key)?.set(value);
    if (chosen) toast(`Preset ${chosen.name} applied`);
  });

  const gpu = config.runsOn === "GPU";
  const text = (id, value, extra = {}) => h("input", {id, name: id, type: "text", value: value ?? "", spellcheck: "false", autocomplete: "off", ...extra});
  const machine = {
    name: text("hub-name", hub.title, {maxlength: 191}),
    gpuPools: text("hub-gpu-pools", found.gpuPools.join(", ")),
    gpuExcluded: text("hub-gpu-excluded", found.gpuExcluded.join(", ")),
    gpuCount: h("input", {id: "hub-gpu-count", type: "number", min: 1, max: 16, value: config.gpuCount ?? 1}),
    cuda: text("hub-cuda", (config.allowedCudaVersions || []).join(", ")),
    cpuFlavor: text("hub-cpu-flavor", config.cpuFlavor || ""),
    disk: h("input", {id: "hub-disk", type: "number", min: 1, max: 10000, value: config.containerDiskInGb}),
    workersMax: h("input", {id: "hub-workers-max", type: "number", min: 0, max: 1000, value: 3}),
  };
  const field = (id, label, control, hint) => h("div", {class: "field"}, h("label", {for: id}, label), control,
    hint ? h("p", {class: "hint"}, hint) : null);
  const type = found.endpointType === "LB" ? "LOAD_BALANCER" : "QUEUE";
  const status = h("div", {"aria-live": "assertive"});
  const submit = h("button", {type: "submit", class: "primary"}, "Create endpoint");

  const body = () => {
    const env = {};
    for (const e of fixed) env[e.key] = envText(null, e.value);
    for (const i of inputs) {
      const value = i.value();
      if (value === null || value === "") continue;
      env[i.key] = envText(i.input, value);
    }
    const list = (input) => input.value.split(",").map((s) => s.trim()).filter(Boolean);
    const out = {
      name: machine.name.value.trim() || hub.title,
      type,
      image: AWAITING_BUILD_IMAGE,
      disk: Number(machine.disk.value),
      env,
      scaling: type === "QUEUE" ? {type: "QUEUE_DELAY", queueDelay: 4} : {type: "REQUEST_COUNT", requestCount: 4},
      workers: {min: 0, max: Number(machine.workersMax.value)},
      source: {git: {url: found.url, ref: found.ref}},
    };
    if (devMode) out.args = AWAITING_BUILD_COMMAND;
    if (gpu) {
      out.gpu = {pools: list(machine.gpuPools), excludedTypes: list(machine.gpuExcluded), count: Number(machine.gpuCount.value)};
      const cuda = list(machine.cuda);
      if (cuda.length) out.gpu.allowedCudaVersions = cuda;
    } else {
      out.cpu = [{id: machine.cpuFlavor.value.trim() || "cpu3c", vcpuCount: 2}];
    }
    return out;
  };

  const form = h("form", {class: "card hub-form", novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    for (const i of inputs) {
      const why = problem(i);
      if (why) {
        replace(status, errorBox(new Error(`${i.input.name || i.key}: ${why}`)));
        i.control.setAttribute("aria-invalid", "true");
        return i.control.focus();
      }
      i.control.removeAttribute("aria-invalid");
    }
    submit.disabled = true;
    try {
      // The source's trigger is RELEASE: the create starts the first build by itself
      // (reason CREATE; none on a cluster that does not build), shown in the Builds tab.
      const made = await api("/v2/serverless", {method: "POST", body: body(), signal: ctx.signal});
      toast(`Created ${made.id}`);
      ctx.go(`#/endpoints/${encodeURIComponent(made.id)}/builds`);
    } catch (err) {
      if (err.name === "AbortError") return;
      replace(status, errorBox(err));
      submit.disabled = false;
    }
  }},
  h("h2", {tabindex: "-1"}, hub.title, " ", h("span", {class: "badge muted"}, hub.category)),
  h("p", {class: "hub-description"}, hub.description),
  h("p", {class: "hint"}, "From ", h("code", {}, found.url), found.ref ? [" at ", h("code", {}, found.ref)] : null,
    `, commit ${found.commit.slice(0, 12)} (${found.path}). ${type === "QUEUE" ? "A queue endpoint" : "A load-balancing endpoint"}.`),
  h("fieldset", {}, h("legend", {}, "Endpoint"),
    h("div", {class: "grid"}, field("hub-name", "Name", machine.name),
      field("hub-workers-max", "Workers max", machine.workersMax))),
  inputs.length || fixed.length ? h("fieldset", {class: "hub-env"}, h("legend", {}, "Settings"),
    preset ? field("hub-preset", "Preset", preset, "Fills the settings below with the preset's values.") : null,
    h("div", {class: "grid"}, basic.map((i) => i.element)),
    advanced.length ? h("details", {class: "advanced"},
      h("summary", {}, `Advanced settings (${advanced.length})`),
      h("div", {class: "grid"}, advanced.map((i) => i.element))) : null,
    fixed.length ? h("p", {class: "hint"}, "Set by the repository: ",
      fixed.map((e, n) => [n ? ", " : "", h("code", {}, `${e.key}=${envText(null, e.value)}`)])) : null) : null,
  h("fieldset", {}, h("legend", {}, gpu ? "GPU" : "CPU"),
    devMode ? h("p", {class: "hint dev-mode-note"}, DEV_MODE_NOTE) : null,
    gpu
      ? h("div", {class: "grid"},
        field("hub-gpu-pools", "GPU pools", machine.gpuPools, "Comma-separated pool ids (GET /v2/catalog/gpus)."),
        field("hub-gpu-excluded", "Excluded GPU types", machine.gpuExcluded),
        field("hub-gpu-count", "GPUs per worker", machine.gpuCount),
        field("hub-cuda", "CUDA versions", machine.cuda, "Comma-separated; empty: any."))
      : h("div", {class: "grid"}, field("hub-cpu-flavor", "CPU flavour", machine.cpuFlavor)),
    h("div", {class: "grid"}, field("hub-disk", "Container disk (GiB)", machine.disk))),
  h("p", {class: "hint"}, "The endpoint is built from the repository (its git source); the first build starts at once. "
    + "Until it completes there is nothing to run."),
  status, h("div", {class: "row"}, submit));
  return form;
}
