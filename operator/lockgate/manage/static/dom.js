// Small DOM helpers shared by every page: no framework, no build step.

/** An element: h("a", {href: "#/x", class: "btn", onclick: fn}, "text", child, [children]). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(el.dataset, value);
    } else if (value === true) {
      el.setAttribute(name, "");
    } else {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace the content of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A short-lived message for the person (copied, saved, …). */
export function toast(message) {
  const el = document.getElementById("toast");
  el.textContent = message;
  el.classList.add("show");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => el.classList.remove("show"), 2500);
}

/** A button that copies `text` to the clipboard. */
export function copyButton(text, label = "Copy") {
  return h("button", {
    type: "button", class: "small", "aria-label": `${label}: ${text}`,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        toast("Copied");
      } catch {
        toast("Copy failed: select the text and copy it by hand");
      }
    },
  }, label);
}

/** An error box with the API's message. */
export function errorBox(error) {
  return h("div", {class: "error", role: "alert"}, error?.message || String(error));
}

/** "3 s", "2 min", "1.2 h" from milliseconds. */
export function duration(ms) {
  if (ms === undefined || ms === null) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}
