// Shared by the Overview and Metrics pages (owner: health): their stylesheet, loaded once
// (a <link> to a file of ours: the CSP allows 'self' styles, never inline ones).

export function useStyles() {
  if (document.getElementById("health-css")) return;
  const link = document.createElement("link");
  link.id = "health-css";
  link.rel = "stylesheet";
  link.href = new URL("./health.css", import.meta.url).href;
  document.head.append(link);
}

/** A labelled number: <div class="stat"><span class="stat-value">3</span> label</div>. */
export function stat(h, label, value, tone = "") {
  return h("div", {class: `stat ${tone}`.trim()},
    h("span", {class: "stat-value"}, String(value ?? "—")),
    h("span", {class: "stat-label"}, label));
}
