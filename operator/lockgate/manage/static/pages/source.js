// An endpoint's git source (`source: {git: {…}}`, models/source.py) in the settings form of
// Create and Edit: off (the template's image or command runs), or a repository the
// workers are built from (docs/builds.md). The template stays: it runs until the first
// build completes and keeps the rest of the container (env, disk, ports).
import {h} from "../dom.js";

// models/source.py GitSource, in its field order (the record's JSON has the same order,
// so an unchanged source compares equal in the Edit diff).
export const GIT_DEFAULTS = {
  url: "", ref: "", dockerfilePath: "Dockerfile", contextPath: ".", credentialsSecret: "",
  trigger: "RELEASE", buildTimeoutMin: 60,
};
const TRIGGERS = [
  ["RELEASE", "A new release (RunPod's)"],
  ["TAG", "A new tag"],
  ["PUSH", "A push to the tracked branch"],
  ["MANUAL", "Nothing: Start a build only (none on create either)"],
];
const TIMEOUT_MAX_MIN = 24 * 60; // models/source.py BUILD_TIMEOUT_MAX_MIN

/** The source's `git` object as the form's inputs say it, in GIT_DEFAULTS' order. */
export function gitOf(values) {
  return Object.fromEntries(Object.keys(GIT_DEFAULTS).map((k) => [k, values[k]]));
}

/** A source as a diff cell shows it: what differs from the defaults, on one line. */
export function shownSource(source) {
  const git = source.git;
  const parts = [`git ${git.url}${git.ref ? `@${git.ref}` : ""}`, `on ${git.trigger}`, `${git.buildTimeoutMin} min`];
  for (const k of ["dockerfilePath", "contextPath", "credentialsSecret"]) {
    if (git[k] !== GIT_DEFAULTS[k]) parts.push(`${k} ${git[k]}`);
  }
  return parts.join(", ");
}

/**
 * The "Build from git" fieldset. `initial` is the record's `source` (or null).
 * Returns {element, value()}: value() is `{git: {…}}`, or null when the box is not ticked.
 */
export function sourceFields(initial, {devMode = false} = {}) {
  const git = {...GIT_DEFAULTS, ...(initial?.git || {})};
  const text = (id, value, extra = {}) => h("input", {id, name: id, type: "text", value, spellcheck: "false", autocomplete: "off", ...extra});
  const inputs = {
    url: text("url", git.url, {placeholder: devMode ? "https://…, file:///path or a local path" : "https://github.com/org/worker.git", maxlength: 2048}),
    ref: text("ref", git.ref, {placeholder: "empty: the default branch", maxlength: 255}),
    dockerfilePath: text("dockerfilePath", git.dockerfilePath, {maxlength: 1024}),
    contextPath: text("contextPath", git.contextPath, {maxlength: 1024}),
    credentialsSecret: text("credentialsSecret", git.credentialsSecret, {placeholder: "empty: a public repository", maxlength: 253}),
    trigger: h("select", {id: "trigger", name: "trigger"}, TRIGGERS.map(([value, label]) =>
      h("option", {value, selected: git.trigger === value}, label))),
    buildTimeoutMin: h("input", {id: "buildTimeoutMin", name: "buildTimeoutMin", type: "number", inputmode: "numeric", min: 1, max: TIMEOUT_MAX_MIN, value: git.buildTimeoutMin}),
  };
  const on = h("input", {type: "checkbox", id: "source-git", name: "source-git", checked: Boolean(initial?.git)});
  const field = (id, label, hint) => h("div", {class: "field", dataset: {field: id}},
    h("label", {for: id}, label), inputs[id], hint ? h("p", {class: "hint"}, hint) : null);
  const fields = h("div", {class: "git-source"},
    h("div", {class: "grid"},
      field("url", "Repository URL", devMode ? "Dev mode also takes file:// URLs and local paths." : "https://, http://, ssh:// or git@host:path"),
      field("ref", "Branch, tag or commit"),
      field("dockerfilePath", "Dockerfile", "Relative to the repository."),
      field("contextPath", "Build context", "Relative to the repository."),
      field("credentialsSecret", "Credentials Secret", "A Secret with the clone's credentials (basic-auth or ssh-auth)."),
      field("trigger", "Builds on"),
      field("buildTimeoutMin", "Build time limit (min)", `1 to ${TIMEOUT_MAX_MIN}; past it the build fails.`)),
    h("p", {class: "hint"}, "The template below runs until the first build completes and keeps the "
      + "rest of the container (env, disk, ports). Creating the endpoint with a source, or adding "
      + "one, starts its first build (unless it builds on Nothing); start more in the Builds tab."));
  const apply = () => { fields.hidden = !on.checked; };
  on.addEventListener("change", apply);
  apply();
  const element = h("fieldset", {class: "source", dataset: {field: "source"}},
    h("legend", {}, "Source"),
    h("label", {class: "inline", for: "source-git"}, on, " Build the worker from a git repository"),
    fields);
  const value = () => {
    if (!on.checked) return null;
    const out = {};
    for (const [name, input] of Object.entries(inputs)) {
      out[name] = name === "buildTimeoutMin" ? (input.value === "" ? "" : Number(input.value)) : input.value.trim();
    }
    return {git: gitOf(out)};
  };
  return {element, value};
}
