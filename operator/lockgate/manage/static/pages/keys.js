// The API keys page (#/keys): list, create (the key is shown once, with a copy button) and
// revoke with confirmation — what `lockgate keys` does, through /v1/keys.
import {api, signOut} from "../api.js";
import {copyButton, errorBox, h, replace, toast} from "../dom.js";

const SCOPES = [
  ["jobs", "jobs: run, read and cancel jobs"],
  ["jobs:read", "jobs:read: status, stream and health only"],
  ["workers", "workers: the worker API"],
  ["admin", "admin: this console and the management API"],
];

// The create form's expiry choices: seconds from now (null: never; "date": the date field).
const EXPIRIES = [
  ["never", "Never", null],
  ["1d", "In 1 day", 86400],
  ["30d", "In 30 days", 30 * 86400],
  ["90d", "In 90 days", 90 * 86400],
  ["1y", "In 1 year", 365 * 86400],
  ["date", "On a date…", "date"],
];

/** A key's expiry in words: "never", "expired", "expires in 3 days", with the exact time. */
export function expiryText(key, now = Date.now()) {
  if (!key.expiresAt) return "never";
  const left = Date.parse(key.expiresAt) - now;
  if (key.expired || left <= 0) return "expired";
  const units = [["day", 86400e3], ["hour", 3600e3], ["minute", 60e3]];
  const [unit, ms] = units.find(([, size]) => left >= size) || ["second", 1e3];
  const count = Math.max(1, Math.round(left / ms));
  return `expires in ${count} ${unit}${count === 1 ? "" : "s"}`;
}

function expiryCell(key) {
  const text = expiryText(key);
  const cls = text === "expired" ? "badge bad expired" : text === "never" ? "" : "expires";
  return h("span", {class: cls, title: key.expiresAt || "never expires"}, text);
}

/** The `expiresAt` the form asks for, or null for never; throws naming the field. */
function chosenExpiry(select, date) {
  const choice = EXPIRIES.find(([value]) => value === select.value);
  if (!choice || choice[2] === null) return null;
  if (choice[2] !== "date") return new Date(Date.now() + choice[2] * 1000).toISOString();
  if (!date.value) throw new Error("Expires: choose a date, or another choice than \"On a date…\".");
  return `${date.value}T00:00:00Z`;
}

export async function render(view, ctx) {
  const list = h("div");
  const created = h("div", {"aria-live": "polite"});
  const refresh = async () => replace(list, table(await api("/v1/keys", {signal: ctx.signal}), ctx, refresh));
  replace(view, h("h1", {}, "API keys"), createForm(ctx, created, refresh), created, h("h2", {}, "Keys"), list);
  await refresh();
}

function createForm(ctx, created, refresh) {
  const name = h("input", {id: "key-name", type: "text", required: true, autocomplete: "off",
    spellcheck: "false", "aria-describedby": "key-name-hint"});
  const endpoints = h("input", {id: "key-endpoints", type: "text", autocomplete: "off",
    spellcheck: "false", "aria-describedby": "key-endpoints-hint"});
  const boxes = SCOPES.map(([value, label]) => {
    const box = h("input", {type: "checkbox", id: `scope-${value}`, name: "scope", value, checked: value === "jobs"});
    return h("label", {class: "inline", for: `scope-${value}`}, box, ` ${label}`);
  });
  const date = h("input", {id: "key-expires-date", type: "date", hidden: true, "aria-label": "Expiry date (UTC midnight)"});
  const expiry = h("select", {id: "key-expires", "aria-describedby": "key-expires-hint",
    onchange: () => { date.hidden = expiry.value !== "date"; if (!date.hidden) date.focus(); }},
  EXPIRIES.map(([value, label]) => h("option", {value}, label)));
  const status = h("div", {"aria-live": "assertive"});
  const form = h("form", {class: "card", novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    const body = {
      name: name.value.trim(),
      scopes: [...form.querySelectorAll("input[name=scope]:checked")].map((b) => b.value),
    };
    const only = endpoints.value.split(",").map((s) => s.trim()).filter(Boolean);
    if (only.length) body.endpoints = only;
    try {
      const expiresAt = chosenExpiry(expiry, date);
      if (expiresAt) body.expiresAt = expiresAt;
      const key = await api("/v1/keys", {method: "POST", body, signal: ctx.signal});
      replace(status);
      form.reset();
      date.hidden = true;
      replace(created, shownOnce(key, created));
      created.querySelector("h2").focus();
      await refresh();
    } catch (err) {
      if (err.name !== "AbortError") replace(status, errorBox(err));
    }
  }},
  h("h2", {}, "Create a key"),
  h("label", {for: "key-name"}, "Name"), name,
  h("p", {class: "hint", id: "key-name-hint"}, "Who owns it: letters, digits and _ . : / @ -; rate limits count per name."),
  h("fieldset", {class: "choice"}, h("legend", {}, "Scopes"), boxes),
  h("label", {for: "key-endpoints"}, "Endpoints (optional)"), endpoints,
  h("p", {class: "hint", id: "key-endpoints-hint"}, "Comma-separated endpoint ids; empty: every endpoint."),
  h("label", {for: "key-expires"}, "Expires"), h("div", {class: "row"}, expiry, date),
  h("p", {class: "hint", id: "key-expires-hint"}, "After this the key is refused (401 \"API key expired\"); it stays listed until revoked. A date means midnight UTC."),
  status, h("button", {type: "submit", class: "primary"}, "Create key"));
  return form;
}

function shownOnce(key, created) {
  return h("section", {class: "card once", "aria-labelledby": "once-title"},
    h("h2", {id: "once-title", tabindex: "-1"}, `Key "${key.name}" created`),
    h("p", {class: "warning"}, "This is the only time the key is shown: copy it now. lockgate keeps only its SHA-256."),
    h("div", {class: "url-cell"}, h("code", {class: "url secret", "aria-label": "The new key"}, key.key), copyButton(key.key, "Copy key")),
    h("button", {type: "button", onclick: () => replace(created)}, "Done"));
}

function table(all, ctx, refresh) {
  const managed = (k) => k.worker || k.workerOf; // made and revoked by lockgate itself
  const keys = all.filter((k) => !managed(k));
  const workers = all.filter(managed);
  return [
    keys.length ? userKeys(keys, ctx, refresh) : h("p", {class: "hint"}, "No key."),
    workers.length ? workerKeys(workers) : null,
  ];
}

/** The keys lockgate makes for workers, shown apart without Revoke: each running worker's
 * temporary key (revoked when it stops) and each endpoint's shared worker key (kept while the
 * endpoint lives). */
function workerKeys(keys) {
  return h("section", {"aria-labelledby": "worker-keys"},
    h("h2", {id: "worker-keys"}, "Worker keys"),
    h("p", {class: "hint"}, "Keys lockgate makes for workers (scope workers): each running worker's "
      + "temporary key, revoked when it stops, and each endpoint's worker key, removed with the "
      + "endpoint. Revoking one by hand would only stop workers from taking jobs, so there is no Revoke here."),
    h("div", {class: "table-wrap"}, h("table", {class: "keys", "aria-label": "Worker keys"},
      h("thead", {}, h("tr", {}, ["Worker", "Id", "Endpoints", "Created"].map((c) => h("th", {scope: "col"}, c)))),
      h("tbody", {}, keys.map((k) => h("tr", {dataset: {key: k.name}},
        h("td", {"data-label": "Worker"}, k.worker ? h("code", {}, k.worker) : `every worker of ${k.workerOf}`),
        h("td", {"data-label": "Id"}, h("code", {}, k.id)),
        h("td", {"data-label": "Endpoints"}, k.endpoints ? k.endpoints.join(", ") : "all"),
        h("td", {"data-label": "Created"}, k.createdAt ? k.createdAt.slice(0, 16).replace("T", " ") : "—")))))));
}

function userKeys(keys, ctx, refresh) {
  const admins = keys.filter((k) => k.scopes.includes("admin"));
  const revoke = (k) => (admins.length === 1 && admins[0] === k
    ? h("span", {class: "hint last-admin"}, "The last admin key: create another before revoking it.")
    : revokeCell(k, ctx, refresh));
  return h("div", {class: "table-wrap"}, h("table", {class: "keys", "aria-label": "Keys"},
    h("thead", {}, h("tr", {}, ["Name", "Id", "Scopes", "Endpoints", "Created", "Expires", ""].map((c) => h("th", {scope: "col"}, c)))),
    h("tbody", {}, keys.map((k) => h("tr", {dataset: {key: k.name}},
      h("td", {"data-label": "Name"}, k.name, k.current ? h("span", {class: "badge ok you"}, "you are signed in with it") : null),
      h("td", {"data-label": "Id"}, h("code", {}, k.id)),
      h("td", {"data-label": "Scopes"}, k.scopes.join(", ")),
      h("td", {"data-label": "Endpoints"}, k.endpoints ? k.endpoints.join(", ") : "all"),
      h("td", {"data-label": "Created"}, k.createdAt ? k.createdAt.slice(0, 16).replace("T", " ") : "—"),
      h("td", {"data-label": "Expires"}, expiryCell(k)),
      h("td", {"data-label": ""}, revoke(k)))))));
}

/** Revoke asks first: an inline confirmation (Escape or Cancel goes back). The key this
 * console is signed in with needs its name typed: revoking it signs the person out. */
function revokeCell(key, ctx, refresh) {
  const cell = h("div", {class: "row"});
  const ask = () => {
    const yes = h("button", {type: "button", class: "danger", disabled: Boolean(key.current), onclick: async () => {
      try {
        await api(`/v1/keys/${encodeURIComponent(key.id)}`, {method: "DELETE", signal: ctx.signal, redirect: !key.current});
        if (key.current) return signOut();
        toast(`Revoked ${key.name}`);
        await refresh();
      } catch (err) {
        if (err.name !== "AbortError") replace(cell, errorBox(err), start);
      }
    }}, `Revoke ${key.name}`);
    const no = h("button", {type: "button", onclick: () => { replace(cell, start); start.focus(); }}, "Cancel");
    cell.onkeydown = (event) => { if (event.key === "Escape") no.click(); };
    if (!key.current) {
      replace(cell, h("span", {role: "alert", class: "confirm"}, "Revoke? Clients using it get 401 at once."), yes, no);
      return no.focus();
    }
    const typed = h("input", {type: "text", id: `confirm-${key.id}`, autocomplete: "off", spellcheck: "false"});
    typed.addEventListener("input", () => { yes.disabled = typed.value.trim() !== key.name; });
    replace(cell, h("div", {class: "confirm own-key"},
      h("p", {role: "alert", class: "warning"}, "This is the key you are signed in with. Revoking it signs you out "
        + "of this console at once, and you need another admin key to sign in again (on a cluster: "
        + "lockgate keys create --scope admin, run where Redis is reachable)."),
      h("label", {for: `confirm-${key.id}`}, "Type ", h("code", {}, key.name), " to revoke it"),
      typed, h("div", {class: "row"}, yes, no)));
    typed.focus();
  };
  const start = h("button", {type: "button", class: "danger small", "aria-label": `Revoke ${key.name}`, onclick: ask}, "Revoke");
  replace(cell, start);
  return cell;
}
