// The Create page (#/new): every setting of the creation payload, POST /v1/endpoints, then a
// live view of the new endpoint until its job API URL shows. #/new?from=repository creates
// from a ready-to-deploy repository instead (pages/hub.js).
import {about, api} from "../api.js";
import {copyButton, errorBox, h, replace} from "../dom.js";
import {endpointForm, markInvalid} from "./form.js";
import * as hub from "./hub.js";
import {isLb, lbUrl} from "./lb.js";
import {conditionWrong} from "./state.js";

export async function render(view, ctx) {
  if (ctx.query.get("from") === "repository") return hub.render(view, ctx);
  const info = await about();
  const {element, payload, image} = endpointForm({}, {devMode: info.mode === "dev"});
  const status = h("div", {"aria-live": "assertive"});
  const submit = h("button", {type: "submit", class: "primary"}, "Create endpoint");
  const form = h("form", {class: "card", novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    submit.disabled = true;
    try {
      const record = await create(payload(), image(), ctx.signal);
      watch(view, ctx, record.id);
    } catch (err) {
      if (err.name === "AbortError") return;
      replace(status, errorBox(err));
      markInvalid(form, err.message);
      submit.disabled = false;
    }
  }}, element, status, h("div", {class: "row"}, submit, h("a", {href: "#/endpoints"}, "Cancel")));
  replace(view, h("h1", {}, "New endpoint"),
    h("p", {class: "from-repository"}, "Or ", h("a", {href: "#/new?from=repository"}, "deploy a ready-to-deploy repository"),
      " (one with ", h("code", {}, ".runpod/hub.json"), ")", info.catalogue?.length ? `: ${info.catalogue.length} offered` : "", "."),
    form);
  form.querySelector("input")?.focus();
}

/**
 * POST /v1/endpoints; from an image, POST /v1/templates first and the endpoint with its
 * templateId. When the endpoint is refused after its template was made, the template is
 * deleted again (nothing half made is left; a second try makes a new one) and the endpoint's
 * error is thrown; should that delete fail too, the error says the template was kept.
 */
async function create(body, image, signal) {
  if (!image) return api("/v1/endpoints", {method: "POST", body, signal});
  const template = await api("/v1/templates", {method: "POST", signal,
    body: image.template(body.name || body.id || image.template("").imageName)});
  const withTemplate = {...body, templateId: template.id};
  if (image.networkVolumeId) withTemplate.networkVolumeId = image.networkVolumeId;
  try {
    return await api("/v1/endpoints", {method: "POST", body: withTemplate, signal});
  } catch (err) {
    try {
      await api(`/v1/templates/${encodeURIComponent(template.id)}`, {method: "DELETE"});
    } catch (cleanup) {
      err.message += ` (template ${template.id} was made and is kept: ${cleanup.message}; see Templates)`;
    }
    throw err;
  }
}

/** The live view: the record's phase and conditions until its job API URL shows. */
function watch(view, ctx, id) {
  const base = `#/endpoints/${encodeURIComponent(id)}`;
  const body = h("div", {"aria-live": "polite"});
  replace(view, h("h1", {}, `Creating ${id}`), h("div", {class: "card"}, body));
  view.querySelector("h1").setAttribute("tabindex", "-1");
  view.querySelector("h1").focus();
  let done = false;
  ctx.every(1500, async () => {
    if (done) return;
    const record = await api(`/v1/endpoints/${encodeURIComponent(id)}`, {signal: ctx.signal});
    const url = record.status?.jobApiUrl?.replace(/\/+$/, ""); // `${url}/runsync` must work
    const failing = (record.status?.conditions || []).filter(conditionWrong);
    replace(body,
      h("p", {}, "Phase: ", h("span", {class: "badge", dataset: {phase: record.status?.phase}}, record.status?.phase || "Pending")),
      failing.map((c) => h("div", {class: "error", role: "alert"}, `${c.type}: ${c.message || c.reason}`)),
      url
        ? [isLb(record)
            ? h("p", {}, "LB URL: ", h("code", {class: "url"}, lbUrl(record)), " ", copyButton(lbUrl(record)))
            : h("p", {}, "Job API URL: ", h("code", {class: "url"}, url), " ", copyButton(url)),
           h("p", {}, h("a", {class: "button primary", href: `${base}/requests`}, "Send a test request"), " ",
             h("a", {href: base}, "Overview"), " · ", h("a", {href: "#/endpoints"}, "All endpoints"))]
        : h("p", {class: "hint"}, "Initialising: the job API URL shows when the endpoint is ready."));
    done = Boolean(url) && record.status?.phase === "Ready";
    if (done) replace(view.querySelector("h1"), `Created ${id}`);
  });
}
