// The Endpoints page: every endpoint with its state (see app.js for render(view, ctx)).
import {api} from "../api.js";
import {h} from "../dom.js";

export async function render(view, ctx) {
  const records = await api("/v1/endpoints", {signal: ctx.signal});
  view.append(
    h("div", {class: "row"}, h("h1", {class: "grow"}, "Endpoints"),
      h("a", {class: "button primary", href: "#/new"}, "New endpoint")),
    records.length
      ? h("ul", {}, records.map((r) => h("li", {}, h("a", {href: `#/endpoints/${r.id}`}, r.id))))
      : h("p", {class: "hint"}, "No endpoint yet."),
  );
}
