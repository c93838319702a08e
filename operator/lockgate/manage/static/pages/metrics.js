// The metrics page: see app.js for render(view, ctx).
import {h} from "../dom.js";

export async function render(view) {
  view.append(h("p", {class: "hint"}, "Not built yet."));
}
