// The rustka console's pages (docs/console.md). Plain JavaScript, no build step.
// Every value from the broker is inserted as text (text nodes, textContent): keys,
// values and names are attacker-controlled and must never become markup.
"use strict";

const state = { timer: null, tail: null, csrf: null, admin: false, route: "", users: false, user: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name === "onclick") node.addEventListener("click", value);
    else if (name === "onsubmit") node.addEventListener("submit", value);
    else if (name === "oninput") node.addEventListener("input", value);
    else if (name === "onchange") node.addEventListener("change", value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

// The quiet line at the bottom: when the page last refreshed, or why it could not.
function status(text, isError) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = isError ? "error" : "";
}

// A message a person notices: the outcome of an action, in a banner that stays a few
// seconds. Errors are announced at once (role=alert), successes politely (role=status).
function toast(text, isError) {
  const holder = document.getElementById("toasts");
  const node = el("div", { class: "toast " + (isError ? "toast-error" : "toast-ok"),
    role: isError ? "alert" : "status" }, text);
  const close = el("button", { type: "button", class: "toast-close", "aria-label": "dismiss" }, "×");
  close.addEventListener("click", () => node.remove());
  node.append(close);
  holder.append(node);
  setTimeout(() => node.remove(), isError ? 12000 : 6000);
}

class SignInNeeded extends Error {}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  const body = await response.json();
  if (response.status === 401 && state.users) { showSignIn(); throw new SignInNeeded(body.error); }
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function session() {
  const body = await api("/api/session");
  state.csrf = body.csrf;
  state.admin = body.admin;
  state.users = body.authentication === "users";
  state.user = body.user;
  const who = document.getElementById("who");
  clear(who);
  document.getElementById("token-box").hidden = state.users;
  if (state.users && state.user) {
    who.append(el("span", { id: "signed-in-as" }, "signed in as " + state.user), " ",
      el("button", { type: "button", class: "secondary", id: "sign-out", onclick: signOut }, "Sign out"));
  }
  return body;
}

async function post(path, body, headers) {
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: Object.assign({ "content-type": "application/json" }, headers || {}),
    body: JSON.stringify(body),
  });
  let answer;
  try { answer = await response.json(); } catch (e) { answer = { error: response.statusText }; }
  return { ok: response.ok, status: response.status, answer };
}

// An admin action: asked first, its button (if given) disabled while it runs, its
// outcome in a toast.
async function adminPost(path, body, question, button) {
  if (!window.confirm(question)) return null;
  if (button) button.disabled = true;
  try {
    if (!state.csrf) await session();
    const headers = { "x-console-csrf": state.csrf || "" };
    if (!state.users) headers.authorization = "Bearer " + document.getElementById("admin-token").value;
    const { ok, answer } = await post(path, body, headers);
    if (!ok) { toast("Failed: " + (answer.error || "error"), true); return null; }
    toast("Done: " + describeAction(path, answer), false);
    return answer;
  } catch (err) {
    toast("Failed: " + err.message, true);
    return null;
  } finally {
    if (button) button.disabled = false;
  }
}

function describeAction(path, answer) {
  if (answer.created !== undefined) return "created topic " + answer.created;
  if (answer.deleted !== undefined) return "deleted topic " + answer.deleted;
  if (answer.partitions !== undefined && answer.topic !== undefined) {
    return "topic " + answer.topic + " now has " + answer.partitions + " partitions";
  }
  if (answer.offsets !== undefined) return "reset " + answer.offsets.length + " offsets of group " + answer.group;
  return path;
}

// -- signing in (console_authentication = "users") -----------------------------------

function showSignIn() {
  stopTimers();
  const main = document.getElementById("main");
  if (document.getElementById("sign-in-form")) return;
  clear(main);
  const user = el("input", { id: "sign-in-user", name: "user", autocomplete: "username", required: "" });
  const password = el("input", { id: "sign-in-password", name: "password", type: "password",
    autocomplete: "current-password", required: "" });
  const button = el("button", { type: "submit", id: "sign-in-button" }, "Sign in");
  const form = el("form", { id: "sign-in-form", class: "sign-in", onsubmit: async (event) => {
    event.preventDefault();
    button.disabled = true;
    try {
      const { ok, answer } = await post("/api/login", { user: user.value, password: password.value });
      if (!ok) { toast(answer.error || "sign-in failed", true); return; }
      password.value = "";
      await session();
      toast("Signed in as " + answer.user, false);
      route();
    } catch (err) {
      toast(err.message, true);
    } finally {
      button.disabled = false;
    }
  } }, el("h1", {}, "Sign in"),
  el("p", { class: "muted" }, "With a user of this broker (its SCRAM credentials)."),
  el("label", { for: "sign-in-user" }, "User name"), user,
  el("label", { for: "sign-in-password" }, "Password"), password, button);
  main.append(form);
  user.focus();
}

async function signOut() {
  await post("/api/logout", {}, {});
  state.user = null; state.csrf = null;
  await session().catch(() => null);
  showSignIn();
}

// -- formatting ---------------------------------------------------------------------

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function fmtRate(n) { return (Math.round(n * 10) / 10).toString(); }

function fmtDuration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
}

function fmtTime(ms) {
  if (ms === null || ms === undefined || ms < 0) return "";
  return new Date(ms).toISOString();
}

function toHex(field) {
  if (field.hex !== undefined) return field.hex;
  return Array.from(new TextEncoder().encode(field.text), b => b.toString(16).padStart(2, "0")).join("");
}

// A key, value or header value as the chosen format shows it: always a string.
function showField(field, format) {
  if (field === null || field === undefined) return null;
  let text;
  if (format === "hex") text = toHex(field).replace(/(..)/g, "$1 ").trim();
  else if (field.text === undefined) text = "0x" + field.hex;
  else if (format === "json") {
    try { text = JSON.stringify(JSON.parse(field.text), null, 2); } catch (e) { text = field.text; }
  } else text = field.text;
  if (field.truncated) text += " … (" + field.size + " bytes, cut)";
  return text;
}

function fieldCell(field, format) {
  const text = showField(field, format);
  if (text === null) return el("td", {}, el("span", { class: "null" }, "null"));
  return el("td", {}, el("pre", {}, text));
}

// -- a small line chart, drawn by hand on a canvas ----------------------------------

function lineChart(id, series) {
  const box = el("div", { class: "chart" });
  const canvas = el("canvas", { id: id, "data-points": "0", role: "img", "aria-label": series.map(s => s.label).join(", ") + " over time" });
  const empty = el("div", { class: "chart-empty", id: id + "-empty" }, "no data yet");
  const tip = el("div", { class: "chart-tip", id: id + "-tip", role: "tooltip", hidden: "" });
  const legend = el("div", { class: "legend", id: id + "-legend" });
  const area = el("div", { class: "chart-area" }, canvas, empty, tip);
  box.append(area, legend);
  const left = 56, right = 10, top = 10, bottom = 22;
  let shown = [];
  // Hover: the nearest point's time and values.
  canvas.addEventListener("mousemove", (event) => {
    if (!shown.length) { tip.hidden = true; return; }
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const t0 = shown[0].t, t1 = shown[shown.length - 1].t, span = Math.max(t1 - t0, 1e-9);
    const width = rect.width;
    let best = shown[shown.length - 1];
    let bestDistance = Infinity;
    for (const p of shown) {
      const px = shown.length === 1 ? width - right : left + (width - left - right) * (p.t - t0) / span;
      if (Math.abs(px - x) < bestDistance) { bestDistance = Math.abs(px - x); best = p; }
    }
    tip.textContent = new Date(best.t * 1000).toLocaleTimeString() + " — " +
      series.map(s => s.label + ": " + fmtRate(best[s.key] || 0)).join(", ");
    tip.hidden = false;
    tip.style.left = Math.min(Math.max(0, x + 12), Math.max(0, width - 220)) + "px";
    tip.style.top = Math.max(0, event.clientY - rect.top - 30) + "px";
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  return {
    node: box,
    draw(points) {
      shown = points;
      empty.hidden = points.length > 0;
      const ratio = window.devicePixelRatio || 1;
      const width = canvas.clientWidth || 600, height = canvas.clientHeight || 220;
      canvas.width = width * ratio; canvas.height = height * ratio;
      const ctx = canvas.getContext("2d");
      ctx.scale(ratio, ratio);
      ctx.clearRect(0, 0, width, height);
      if (!points.length) { canvas.dataset.points = "0"; clear(legend); return; }
      let max = 1;
      for (const p of points) for (const s of series) max = Math.max(max, p[s.key] || 0);
      ctx.strokeStyle = "#d9dee7"; ctx.fillStyle = "#667085"; ctx.font = "11px sans-serif";
      for (let i = 0; i <= 4; i += 1) {
        const y = top + (height - top - bottom) * i / 4;
        ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(width - right, y); ctx.stroke();
        ctx.fillText(fmtRate(max * (4 - i) / 4), 4, y + 4);
      }
      const t0 = points[0].t, t1 = points[points.length - 1].t;
      ctx.fillText(new Date(t0 * 1000).toLocaleTimeString(), left, height - 6);
      const last = new Date(t1 * 1000).toLocaleTimeString();
      ctx.fillText(last, width - right - ctx.measureText(last).width, height - 6);
      const span = Math.max(t1 - t0, 1e-9);
      for (const s of series) {
        ctx.strokeStyle = s.color; ctx.lineWidth = 2; ctx.beginPath();
        points.forEach((p, i) => {
          const x = points.length === 1 ? width - right
            : left + (width - left - right) * (p.t - t0) / span;
          const y = top + (height - top - bottom) * (1 - (p[s.key] || 0) / max);
          if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
        });
        ctx.stroke();
      }
      canvas.dataset.points = String(points.length);
      clear(legend);
      const latest = points[points.length - 1];
      for (const s of series) {
        const peak = points.reduce((m, p) => Math.max(m, p[s.key] || 0), 0);
        const item = el("span", { class: "series-" + s.key },
          s.label + ": " + fmtRate(latest[s.key] || 0) + " (peak " + fmtRate(peak) + ")");
        item.dataset.key = s.key;
        item.dataset.last = String(latest[s.key] || 0);
        item.dataset.peak = String(peak);
        legend.append(item);
      }
    },
  };
}

// -- pages --------------------------------------------------------------------------

function card(label, value, id) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label),
    el("div", { class: "value", id: id }, value));
}

function table(headers, rows, id) {
  const head = el("tr", {}, ...headers.map(h => el("th", { class: h.num ? "num" : "" }, h.label || h)));
  return el("table", id ? { id: id } : {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function td(value, num) { return el("td", { class: num ? "num" : "" }, value); }

function link(href, text) { return el("a", { href: href }, text); }

function topicHref(name) { return "#/topic/" + encodeURIComponent(name); }
function groupHref(name) { return "#/group/" + encodeURIComponent(name); }

function overviewPage(main) {
  const chart = lineChart("rate-chart", [
    { key: "records_in", label: "records in/s", color: "#2f6fde" },
    { key: "bytes_out", label: "bytes out/s", color: "#12a150" },
  ]);
  const cards = el("div", { class: "cards", id: "overview-cards" });
  const failures = el("div", { id: "failures" });
  const brokers = el("div", { id: "brokers" });
  main.append(el("h1", {}, "Overview"), cards, el("h2", {}, "Brokers"), brokers,
    el("h2", {}, "Produce and fetch rates"), chart.node,
    el("h2", {}, "Background failures"), failures);
  return async () => {
    const o = await api("/api/overview");
    clear(cards);
    cards.append(card("Version", o.version, "version"), card("Uptime", fmtDuration(o.uptime_s), "uptime"),
      card("Data dir size", fmtBytes(o.data_dir_bytes), "data-size"),
      card("Free disk", fmtBytes(o.disk_free_bytes), "disk-free"),
      card("Native connections", o.connections.native, "conn-native"),
      card("Kafka connections", o.connections.kafka, "conn-kafka"),
      card("Topics", o.topics, "topic-count"), card("Partitions", o.partitions, "partition-count"),
      card("Groups", o.groups, "group-count"), card("Records in", o.totals.records_in, "records-in"));
    clear(brokers);
    brokers.append(table(["Broker", "Address", "Group coordinator", { label: "Partitions led", num: true }],
      o.brokers.map(b => el("tr", { "data-broker": String(b.node_id) },
        td(String(b.node_id) + (b.this ? " (this one)" : "")), td(b.address),
        td(b.coordinator ? "yes" : ""), td(b.leads, true))), "brokers-table"));
    clear(failures);
    failures.append(table(["Task", { label: "Failures", num: true }],
      Object.entries(o.background_failures).map(([k, v]) => el("tr", {}, td(k), td(v, true)))));
    chart.draw(o.rates);
  };
}

// A table a person can sort (click a column's header) and filter (the box above it).
// Its sort and filter outlive the page's refreshes; `update` takes fresh rows.
// columns: { label, key (what sorting and filtering use), num, cell(row) -> td }.
function dataTable(id, columns, rowAttrs, what) {
  const view = { key: null, dir: 1, filter: "", rows: [] };
  const filter = el("input", { type: "search", id: id + "-filter", class: "table-filter",
    "aria-label": "filter " + what, placeholder: "filter " + what + "…" });
  const count = el("span", { class: "muted", id: id + "-count" });
  const heads = columns.map((c) => {
    const button = el("button", { type: "button", class: "sort" }, c.label);
    const th = el("th", { class: c.num ? "num" : "", "data-key": c.key }, button);
    button.addEventListener("click", () => {
      view.dir = view.key === c.key ? -view.dir : 1;
      view.key = c.key;
      render();
    });
    return th;
  });
  const body = el("tbody");
  const node = el("div", { class: "data-table" }, el("div", { class: "table-tools" }, filter, count),
    el("table", { id: id }, el("thead", {}, el("tr", {}, ...heads)), body));
  filter.addEventListener("input", () => { view.filter = filter.value.toLowerCase(); render(); });
  function render() {
    const column = columns.find(c => c.key === view.key);
    let rows = view.rows.filter(r => !view.filter ||
      columns.some(c => String(r[c.key] ?? "").toLowerCase().includes(view.filter)));
    if (column) {
      rows = rows.slice().sort((x, y) => {
        const a = x[column.key], b = y[column.key];
        const order = column.num ? (a - b) : String(a).localeCompare(String(b));
        return order * view.dir;
      });
    }
    for (const th of heads) {
      if (th.dataset.key === view.key) th.setAttribute("aria-sort", view.dir > 0 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
    clear(body);
    for (const r of rows) body.append(el("tr", rowAttrs(r), ...columns.map(c => c.cell(r))));
    count.textContent = rows.length === view.rows.length ? view.rows.length + " " + what
      : rows.length + " of " + view.rows.length + " " + what;
  }
  return { node, update(rows) { view.rows = rows; render(); } };
}

function topicsPage(main) {
  const topics = dataTable("topics-table", [
    { label: "Topic", key: "name", cell: t => el("td", {}, link(topicHref(t.name), t.name)) },
    { label: "Partitions", key: "partitions", num: true, cell: t => td(t.partitions, true) },
    { label: "Log start", key: "log_start_offset", num: true, cell: t => td(t.log_start_offset, true) },
    { label: "Log end", key: "end_offset", num: true, cell: t => td(t.end_offset, true) },
    { label: "Records", key: "records", num: true, cell: t => td(t.records, true) },
    { label: "Size", key: "size_bytes", num: true, cell: t => td(fmtBytes(t.size_bytes), true) },
    { label: "Records/s", key: "records_in_per_s", num: true, cell: t => td(fmtRate(t.records_in_per_s), true) },
    { label: "Configs", key: "config_text", cell: t => td(t.config_text) },
  ], t => ({ "data-topic": t.name }), "topics");
  const button = el("button", { type: "submit" }, "Create topic");
  const create = el("form", { class: "inline", onsubmit: async (event) => {
    event.preventDefault();
    const name = create.querySelector("[name=name]").value;
    const partitions = parseInt(create.querySelector("[name=partitions]").value, 10);
    const done = await adminPost("/api/admin/topics", { name, partitions },
      "Create topic " + name + " with " + partitions + " partitions?", button);
    if (done) refresh().catch(err => status(err.message, true));
  } }, el("label", { for: "new-topic-name" }, "Name"),
  el("input", { name: "name", id: "new-topic-name", placeholder: "topic name", required: "" }),
  el("label", { for: "new-topic-partitions" }, "Partitions"),
  el("input", { name: "partitions", id: "new-topic-partitions", type: "number", min: "1", value: "1" }),
  button);
  main.append(el("h1", {}, "Topics"), topics.node,
    el("div", { class: "admin-box" }, el("h2", {}, "Create a topic"), create));
  const refresh = async () => {
    const body = await api("/api/topics");
    topics.update(body.topics.map(t => Object.assign({}, t, {
      config_text: Object.entries(t.configs).map(([k, v]) => k + "=" + v).join(", ") })));
  };
  return refresh;
}

function topicPage(main, name) {
  const chart = lineChart("topic-chart", [{ key: "records_in", label: "records in/s", color: "#2f6fde" }]);
  const parts = el("div"), configs = el("div");
  const grow = el("input", { type: "number", min: "1", name: "partitions", id: "grow-partitions" });
  const growButton = el("button", { type: "button" }, "Add partitions");
  growButton.addEventListener("click", async () => {
    const count = parseInt(grow.value, 10);
    await adminPost("/api/admin/topics/" + encodeURIComponent(name) + "/partitions",
      { partitions: count }, "Grow topic " + name + " to " + count + " partitions?", growButton);
  });
  const deleteButton = el("button", { type: "button", class: "danger" }, "Delete topic");
  deleteButton.addEventListener("click", async () => {
    const done = await adminPost("/api/admin/topics/" + encodeURIComponent(name) + "/delete",
      { confirm: name }, "Delete topic " + name + " and all its records? This cannot be undone.", deleteButton);
    if (done) location.hash = "#/topics";
  });
  const admin = el("div", { class: "admin-box" }, el("h2", {}, "Admin"),
    el("div", { class: "toolbar" }, el("label", { for: "grow-partitions" }, "Partitions"), grow,
      growButton, deleteButton));
  main.append(el("h1", {}, "Topic ", el("span", { id: "topic-name" }, name)), el("h2", {}, "Partitions"), parts,
    el("h2", {}, "Produce rate"), chart.node, el("h2", {}, "Configs"), configs, admin);
  return async () => {
    const t = await api("/api/topics/" + encodeURIComponent(name));
    clear(parts);
    parts.append(table([{ label: "Partition", num: true }, { label: "Log start", num: true },
      { label: "Log end", num: true }, { label: "Records", num: true }, { label: "Size", num: true },
      { label: "Segments", num: true }, "Browse"],
    t.partitions.map(p => el("tr", {}, td(p.partition, true), td(p.log_start_offset, true),
      td(p.end_offset, true), td(p.records, true), td(fmtBytes(p.size_bytes), true), td(p.segments, true),
      el("td", {}, link("#/messages/" + encodeURIComponent(name) + "/" + p.partition, "messages")))),
    "partitions-table"));
    clear(configs);
    configs.append(table(["Config", "Value", "Source"], t.effective_configs.map(c =>
      el("tr", {}, td(c.name), td(c.value === null ? "" : c.value), td(c.source)))));
    chart.draw(t.rates);
  };
}

// A record as a person would copy it: keys and values as text (or hex), JSON parsed.
function recordAsJson(r) {
  const plain = (f) => {
    if (f === null || f === undefined) return null;
    if (f.text === undefined) return { hex: f.hex };
    try { return { json: JSON.parse(f.text) }; } catch (e) { return f.text; }
  };
  const out = { offset: r.offset, timestamp: r.timestamp, timestamp_type: r.timestamp_type,
    key: plain(r.key), value: plain(r.value),
    headers: r.headers.map(h => ({ key: h.key, value: plain(h.value) })) };
  if (r.decoded) out.decoded = r.decoded;
  return out;
}

async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) { await navigator.clipboard.writeText(text); return true; }
  } catch (e) { /* no permission: fall back to a selection copy */ }
  const area = el("textarea", { class: "offscreen", "aria-hidden": "true", readonly: "" });
  area.value = text;
  document.body.append(area);
  area.select();
  let done = false;
  try { done = document.execCommand("copy"); } catch (e) { done = false; }
  area.remove();
  return done;
}

function valueCell(r, format) {
  if (!r.decoded || r.decoded.error || format === "hex") return fieldCell(r.value, format);
  return el("td", { class: "decoded" },
    el("span", { class: "badge", title: r.decoded.subject || "" }, "schema id " + r.decoded.schema_id),
    el("pre", {}, JSON.stringify(r.decoded.value, null, 2)));
}

// One record in full: key, value and headers as text, pretty JSON and hex; a copy button.
function recordDetail(r, columns) {
  const section = (title, field) => {
    const parts = [el("h3", {}, title)];
    if (field === null || field === undefined) {
      parts.push(el("span", { class: "null" }, "null"));
      return [el("div", { class: "detail-" + title.toLowerCase() }, ...parts)];
    }
    parts.push(el("div", { class: "muted" }, field.size + " bytes" + (field.truncated ? " (cut to the page's byte limit)" : "")));
    if (field.text !== undefined) {
      parts.push(el("div", { class: "label" }, "text"), el("pre", { class: "detail-text" }, field.text));
      try {
        const parsed = JSON.parse(field.text);
        parts.push(el("div", { class: "label" }, "JSON"), el("pre", { class: "detail-json" }, JSON.stringify(parsed, null, 2)));
      } catch (e) { /* not JSON */ }
    }
    parts.push(el("div", { class: "label" }, "hex"), el("pre", { class: "detail-hex" }, toHex(field).replace(/(..)/g, "$1 ").trim()));
    return [el("div", { class: "detail-" + title.toLowerCase() }, ...parts)];
  };
  const copy = el("button", { type: "button", class: "secondary copy-record" }, "Copy as JSON");
  copy.addEventListener("click", async () => {
    const text = JSON.stringify(recordAsJson(r), null, 2);
    copy.dataset.copied = text;
    const done = await copyText(text);
    toast(done ? "Record " + r.offset + " copied" : "Copy failed: select the text instead", !done);
  });
  const box = el("div", { class: "record-detail" },
    el("div", { class: "toolbar" }, el("strong", {}, "Offset " + r.offset), " ",
      el("span", { class: "muted" }, fmtTime(r.timestamp) + " (" + r.timestamp_type + ")"), copy),
    ...section("Key", r.key), ...section("Value", r.value));
  if (r.decoded) {
    box.append(el("h3", {}, "Decoded"), r.decoded.error ? el("div", { class: "error" }, r.decoded.error)
      : el("div", {}, el("span", { class: "badge" }, "schema id " + r.decoded.schema_id),
        " " + (r.decoded.schema_type || "") + " " + (r.decoded.subject || ""),
        el("pre", { class: "detail-decoded" }, JSON.stringify(r.decoded.value, null, 2))));
  }
  box.append(el("h3", {}, "Headers (" + r.headers.length + ")"));
  for (const h of r.headers) box.append(el("div", { class: "label" }, h.key), el("pre", {}, showField(h.value, "text") ?? "null"));
  return el("tr", { class: "detail", "data-detail": r.offset }, el("td", { colspan: String(columns) }, box));
}

const SORTS = {
  "offset-asc": (a, b) => a.offset - b.offset,
  "offset-desc": (a, b) => b.offset - a.offset,
  "time-asc": (a, b) => a.timestamp - b.timestamp || a.offset - b.offset,
  "time-desc": (a, b) => b.timestamp - a.timestamp || b.offset - a.offset,
};

function labelled(id, text, control) { return [el("label", { for: id }, text), control]; }

function messagesPage(main, name, partition) {
  const base = "/api/topics/" + encodeURIComponent(name) + "/partitions/" + partition;
  const mode = el("select", { name: "mode", id: "mode" }, el("option", { value: "latest" }, "latest N"),
    el("option", { value: "offset" }, "from offset"), el("option", { value: "timestamp" }, "from time (ms)"));
  const at = el("input", { name: "at", id: "at", value: "50", size: "16" });
  const format = el("select", { name: "format", id: "format" }, el("option", { value: "text" }, "text"),
    el("option", { value: "json" }, "JSON"), el("option", { value: "hex" }, "hex"));
  const size = el("select", { name: "size", id: "page-size" },
    ...[20, 50, 100, 200, 500].map(n => el("option", n === 50 ? { value: n, selected: "" } : { value: n }, n)));
  const sort = el("select", { name: "sort", id: "sort" }, el("option", { value: "offset-asc" }, "offset ↑"),
    el("option", { value: "offset-desc" }, "offset ↓"), el("option", { value: "time-asc" }, "time ↑"),
    el("option", { value: "time-desc" }, "time ↓"));
  const key = el("input", { name: "key", id: "search-key", size: "14", placeholder: "key" });
  const keyMatch = el("select", { name: "key_match", id: "search-key-match" },
    el("option", { value: "substring" }, "contains"), el("option", { value: "exact" }, "is exactly"));
  const value = el("input", { name: "value", id: "search-value", size: "18", placeholder: "text in the value" });
  const header = el("input", { name: "header", id: "search-header", size: "14", placeholder: "name or name=value" });
  const from = el("input", { name: "from", id: "search-from", type: "datetime-local", step: "1" });
  const to = el("input", { name: "to", id: "search-to", type: "datetime-local", step: "1" });
  const info = el("p", { class: "muted", id: "messages-info", role: "status" });
  const body = el("tbody", { id: "messages-body" });
  const tailButton = el("button", { class: "secondary", type: "button", id: "tail-button" }, "Live tail");
  const prev = el("button", { type: "button", class: "secondary", id: "page-prev", disabled: "" }, "← Previous");
  const next = el("button", { type: "button", class: "secondary", id: "page-next", disabled: "" }, "Next →");
  const loadButton = el("button", { type: "submit" }, "Load");
  const COLUMNS = 6;
  let records = [];
  let last = null;           // the last page's answer
  const back = [];           // where the pages before this one started
  const open = new Set();    // offsets of the expanded records
  const searching = () => Boolean(key.value || value.value || header.value || from.value || to.value);
  const row = (r) => {
    const expand = el("button", { type: "button", class: "expand", "aria-expanded": String(open.has(r.offset)),
      "aria-label": "show record " + r.offset + " in full" }, open.has(r.offset) ? "▾" : "▸");
    expand.addEventListener("click", () => {
      if (open.has(r.offset)) open.delete(r.offset); else open.add(r.offset);
      render();
    });
    return el("tr", { "data-offset": r.offset }, td(r.offset, true), td(fmtTime(r.timestamp)),
      fieldCell(r.key, format.value), valueCell(r, format.value),
      el("td", {}, ...r.headers.map(h => el("div", {}, h.key + ": " + (showField(h.value, format.value) ?? "null")))),
      el("td", {}, expand));
  };
  const render = () => {
    clear(body);
    for (const r of records.slice().sort(SORTS[sort.value])) {
      body.append(row(r));
      if (open.has(r.offset)) body.append(recordDetail(r, COLUMNS));
    }
  };
  format.addEventListener("change", render);
  sort.addEventListener("change", render);
  const ms = (input) => input.value ? String(new Date(input.value).getTime()) : "";
  const query = (position) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(position)) q.set(k, v);
    q.set("limit", size.value);
    if (key.value) { q.set("key", key.value); q.set("key_match", keyMatch.value); }
    if (value.value) q.set("value", value.value);
    if (header.value) q.set("header", header.value);
    if (from.value) q.set("from_ts", ms(from));
    if (to.value) q.set("to_ts", ms(to));
    return q.toString();
  };
  const show = async (position) => {
    loadButton.disabled = true;
    try {
      const page = await api(base + "/messages?" + query(position));
      last = page;
      records = page.records;
      const cut = page.truncated ? (searching() ? " (the scan stopped at its limit: Next carries on)" : " (cut at the byte limit)") : "";
      info.textContent = "offsets " + page.log_start_offset + " to " + page.end_offset + "; showing " +
        page.records.length + " from " + page.first_offset + " to " + (page.next_offset - 1) +
        (searching() ? "; scanned " + page.scanned + ", matched " + page.matched : "") + cut;
      prev.disabled = !(back.length || (!searching() && page.first_offset > page.log_start_offset));
      next.disabled = page.next_offset >= page.end_offset;
      render();
    } finally {
      loadButton.disabled = false;
    }
  };
  const load = () => {
    back.length = 0;
    endTail();
    if (mode.value === "latest" && !searching()) return show({ latest: at.value || size.value });
    if (mode.value === "latest") return show({ offset: "0" });
    return show({ [mode.value]: at.value });
  };
  const failed = (err) => { if (!(err instanceof SignInNeeded)) toast(err.message, true); };
  const endTail = () => { stopTail(); tailButton.textContent = "Live tail"; };
  next.addEventListener("click", () => {
    if (!last) return;
    endTail();
    back.push(last.first_offset);
    show({ offset: String(last.next_offset) }).catch(failed);
  });
  prev.addEventListener("click", () => {
    if (!last) return;
    endTail();
    const start = back.length ? back.pop()
      : Math.max(last.log_start_offset, last.first_offset - parseInt(size.value, 10));
    show({ offset: String(start) }).catch(failed);
  });
  const form = el("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); load().catch(failed); } },
    ...labelled("mode", "Show", mode), el("label", { for: "at", class: "visually-hidden" }, "how many, offset or time"), at,
    ...labelled("page-size", "page size", size), ...labelled("format", "as", format),
    ...labelled("sort", "sort", sort), loadButton, tailButton);
  const search = el("div", { class: "toolbar search" },
    ...labelled("search-key", "Key", key), el("label", { for: "search-key-match", class: "visually-hidden" }, "key match"), keyMatch,
    ...labelled("search-value", "Value", value), ...labelled("search-header", "Header", header),
    ...labelled("search-from", "From", from), ...labelled("search-to", "to", to));
  for (const input of [key, value, header, from, to]) {
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); load().catch(failed); } });
  }
  // The tail keeps the table in one order (the chosen sort) and, past the page size,
  // drops the oldest records.
  tailButton.addEventListener("click", () => {
    if (state.tail) { stopTail(); tailButton.textContent = "Live tail"; return; }
    // From the log's end as the page last saw it: nothing produced since is missed.
    const q = new URLSearchParams(query(last ? { offset: String(last.end_offset) } : {}));
    q.delete("limit");
    const source = new EventSource(base + "/tail?" + q.toString());
    state.tail = source;
    tailButton.textContent = "Stop tail";
    source.addEventListener("records", (event) => {
      const data = JSON.parse(event.data);
      const seen = new Set(records.map(r => r.offset));
      for (const r of data.records) if (!seen.has(r.offset)) records.push(r);
      records.sort(SORTS["offset-asc"]);
      const cap = parseInt(size.value, 10);
      if (records.length > cap) records.splice(0, records.length - cap);
      info.textContent = "live: next offset " + data.next_offset + "; keeping the newest " + cap + " records";
      render();
    });
    source.addEventListener("error", () => status("tail interrupted; retrying", true));
  });
  main.append(el("h1", {}, "Messages of ", link(topicHref(name), name), " partition " + partition), form,
    el("details", { class: "search-box", open: "" }, el("summary", {}, "Search (on the broker, bounded)"), search),
    el("div", { class: "toolbar" }, prev, next, info),
    table([{ label: "Offset", num: true }, "Timestamp", "Key", "Value", "Headers", ""], []));
  main.querySelector("table").replaceChild(body, main.querySelector("tbody"));
  load().catch(failed);
  return null;
}

function clientsPage(main) {
  const open = new Set();
  const holder = el("div", { id: "clients-holder" });
  const clients = dataTable("clients-table", [
    { label: "Client id", key: "client_id", cell: c => td(c.client_id) },
    { label: "Instance", key: "client_instance_id", cell: c => td(c.client_instance_id) },
    { label: "Software", key: "software", cell: c => td(c.software) },
    { label: "Principal", key: "principal", cell: c => td(c.principal) },
    { label: "Address", key: "address", cell: c => td(c.address) },
    { label: "Last push", key: "last_push_ms", num: true, cell: c => td(fmtTime(c.last_push_ms)) },
    { label: "Metrics", key: "metric_count", num: true, cell: c => {
      const id = "metrics-" + c.client_instance_id;
      const button = el("button", { type: "button", class: "secondary show-metrics", "aria-expanded": String(open.has(c.client_instance_id)),
        "aria-controls": id }, (open.has(c.client_instance_id) ? "hide " : "show ") + c.metric_count);
      button.addEventListener("click", () => {
        if (open.has(c.client_instance_id)) open.delete(c.client_instance_id); else open.add(c.client_instance_id);
        refresh().catch(err => status(err.message, true));
      });
      const cell = el("td", { class: "num" }, button);
      if (open.has(c.client_instance_id)) {
        cell.append(el("table", { class: "metrics-table", id: id },
          el("thead", {}, el("tr", {}, el("th", {}, "Metric"), el("th", {}, "Kind"), el("th", { class: "num" }, "Value"), el("th", {}, "Labels"))),
          el("tbody", {}, ...c.metrics.map(m => el("tr", {}, td(m.name), td(m.kind), td(fmtMetric(m.value), true),
            td(Object.entries(m.labels || {}).map(([k, v]) => k + "=" + v).join(", ")))))));
      }
      return cell;
    } },
  ], c => ({ "data-client": c.client_instance_id }), "clients");
  main.append(el("h1", {}, "Clients"), el("p", { class: "muted" },
    "Clients that push their metrics to the broker (KIP-714 client telemetry)."), holder);
  let shown = false;
  const refresh = async () => {
    const response = await fetch("/api/clients", { credentials: "same-origin" });
    const body = await response.json();
    if (response.status === 401 && state.users) { showSignIn(); throw new SignInNeeded(body.error); }
    if (response.status === 404) {
      clear(holder); shown = false;
      holder.append(el("p", { id: "clients-off", class: "empty" }, "Client telemetry is off: " + body.error + "."));
      return;
    }
    if (!response.ok) throw new Error(body.error || response.statusText);
    if (!shown) { clear(holder); holder.append(clients.node); shown = true; }
    clients.update(body.clients.map(c => Object.assign({}, c, {
      software: (c.software_name || "") + " " + (c.software_version || ""), metric_count: c.metrics.length })));
  };
  return refresh;
}

function fmtMetric(n) { return Number.isInteger(n) ? String(n) : n.toPrecision(6).replace(/\.?0+$/, ""); }

function groupsPage(main) {
  const groups = dataTable("groups-table", [
    { label: "Group", key: "group", cell: g => el("td", {}, link(groupHref(g.group), g.group)) },
    { label: "Type", key: "type", cell: g => td(g.type) },
    { label: "Protocol", key: "protocol_type", cell: g => td(g.protocol_type) },
    { label: "State", key: "state", cell: g => td(g.state) },
    { label: "Members", key: "members", num: true, cell: g => td(g.members, true) },
    { label: "Partitions", key: "partitions", num: true, cell: g => td(g.partitions, true) },
    { label: "Lag", key: "lag", num: true,
      cell: g => el("td", { class: "num lag" + (g.lag > 0 ? " lag-high" : "") }, g.lag) },
  ], g => ({ "data-group": g.group, "data-type": g.type }), "groups");
  main.append(el("h1", {}, "Groups"), groups.node);
  return async () => { groups.update((await api("/api/groups")).groups); };
}

// A share group (a queue): each partition's in-flight window instead of committed offsets.
function shareGroupView(g, summary, offsets, members) {
  summary.append(card("State", g.state, "group-state"), card("Type", "share", "group-type"),
    card("Epoch", g.group_epoch), card("Not yet delivered", g.lag, "group-lag"));
  offsets.append(table(["Topic", { label: "Partition", num: true }, { label: "Start", num: true },
    { label: "Window end", num: true }, { label: "Log end", num: true }, { label: "Available", num: true },
    { label: "Acquired", num: true }, { label: "Acknowledged", num: true }, { label: "Archived", num: true }],
  g.partitions.map(w => el("tr", {}, el("td", {}, link(topicHref(w.topic), w.topic)), td(w.partition, true),
    td(w.start_offset, true), td(w.end_offset, true), td(w.log_end_offset, true), td(w.available, true),
    el("td", { class: "num acquired" }, w.acquired), td(w.acknowledged, true), td(w.archived, true))),
  "share-table"));
  members.append(table(["Member", { label: "Epoch", num: true }, "Assignment"], g.members.map(m => el("tr", {},
    td(m.member_id), td(m.member_epoch, true),
    td(m.assignment.map(a => a.topic + "[" + a.partitions.join(",") + "]").join(" "))))));
}

function groupPage(main, name) {
  const chart = lineChart("lag-chart", [{ key: "lag", label: "lag", color: "#c0392b" }]);
  const summary = el("div", { class: "cards" }), members = el("div"), offsets = el("div");
  const topic = el("input", { name: "topic", id: "reset-topic", placeholder: "topic" });
  const to = el("select", { name: "to", id: "reset-to" }, el("option", { value: "earliest" }, "earliest"),
    el("option", { value: "latest" }, "latest"), el("option", { value: "offset" }, "offset"));
  const offset = el("input", { name: "offset", id: "reset-offset", type: "number", min: "0", placeholder: "offset" });
  const reset = el("button", { type: "button", class: "danger" }, "Reset");
  reset.addEventListener("click", async () => {
    const target = to.value === "offset" ? parseInt(offset.value, 10) : to.value;
    await adminPost("/api/admin/groups/" + encodeURIComponent(name) + "/reset-offsets",
      { topic: topic.value, to: target }, "Reset group " + name + " on " + topic.value + " to " + target + "?", reset);
  });
  const admin = el("div", { class: "admin-box" }, el("h2", {}, "Reset offsets"), el("div", { class: "toolbar" },
    el("label", { for: "reset-topic" }, "Topic"), topic, el("label", { for: "reset-to" }, "to"), to,
    el("label", { for: "reset-offset" }, "Offset"), offset, reset));
  const lagTitle = el("h2", {}, "Lag over time");
  const offsetsTitle = el("h2", {}, "Committed offsets and lag");
  main.append(el("h1", {}, "Group ", el("span", { id: "group-name" }, name)), summary,
    lagTitle, chart.node, offsetsTitle, offsets, el("h2", {}, "Members"), members, admin);
  return async () => {
    const g = await api("/api/groups/" + encodeURIComponent(name));
    clear(summary);
    if (g.type === "share") {
      // Share groups commit no offsets: no lag history and no reset here.
      for (const node of [lagTitle, chart.node, admin]) node.style.display = "none";
      offsetsTitle.textContent = "In-flight records per partition";
      clear(offsets); clear(members);
      shareGroupView(g, summary, offsets, members);
      return;
    }
    const consumer = g.type === "consumer";
    summary.append(card("State", g.state, "group-state"), card("Type", g.type, "group-type"),
      card(consumer ? "Assignor" : "Protocol", g.protocol || "—"),
      card(consumer ? "Group epoch" : "Generation", g.generation), card("Total lag", g.lag, "group-lag"));
    clear(offsets);
    offsets.append(table(["Topic", { label: "Partition", num: true }, { label: "Committed", num: true },
      { label: "Log end", num: true }, { label: "Lag", num: true }],
    g.offsets.map(o => el("tr", {}, el("td", {}, link(topicHref(o.topic), o.topic)), td(o.partition, true),
      td(o.committed, true), td(o.end_offset, true), el("td", { class: "num lag" }, o.lag))), "offsets-table"));
    clear(members);
    const parts = list => list.map(a => a.topic + "[" + a.partitions.join(",") + "]").join(" ");
    members.append(consumer
      ? table(["Member", { label: "Epoch", num: true }, "Client", "Host", "Assignment", "Target"],
        g.members.map(m => el("tr", {}, td(m.member_id), td(m.member_epoch, true), td(m.client_id),
          td(m.client_host), td(parts(m.assignment)), td(parts(m.target_assignment)))), "members-table")
      : table(["Member", "Client", "Host", "Assignment"], g.members.map(m => el("tr", {},
        td(m.member_id), td(m.client_id), td(m.client_host), td(parts(m.assignment)))), "members-table"));
    chart.draw(g.lag_history.map(p => ({ t: p.t, lag: p.lag })));
  };
}

// -- routing ------------------------------------------------------------------------

function stopTail() { if (state.tail) { state.tail.close(); state.tail = null; } }

function stopTimers() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
  stopTail();
}

function route() {
  stopTimers();
  const main = document.getElementById("main");
  clear(main);
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  let refresh;
  let nav = "overview";
  if (parts[0] === "topics") { refresh = topicsPage(main); nav = "topics"; }
  else if (parts[0] === "topic" && parts[1]) { refresh = topicPage(main, parts[1]); nav = "topics"; }
  else if (parts[0] === "messages" && parts[1]) { refresh = messagesPage(main, parts[1], parseInt(parts[2] || "0", 10)); nav = "topics"; }
  else if (parts[0] === "groups") { refresh = groupsPage(main); nav = "groups"; }
  else if (parts[0] === "group" && parts[1]) { refresh = groupPage(main, parts[1]); nav = "groups"; }
  else if (parts[0] === "clients") { refresh = clientsPage(main); nav = "clients"; }
  else refresh = overviewPage(main);
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.id === "nav-" + nav);
  if (refresh) {
    const tick = () => refresh().then(() => status("updated " + new Date().toLocaleTimeString()),
      err => { if (!(err instanceof SignInNeeded)) status(err.message, true); });
    tick();
    state.timer = setInterval(tick, 2000);
  }
}

window.addEventListener("hashchange", () => { if (!state.users || state.user) route(); });
window.addEventListener("DOMContentLoaded", () => {
  const token = document.getElementById("admin-token");
  token.value = sessionStorage.getItem("rustka-admin-token") || "";
  token.addEventListener("change", () => sessionStorage.setItem("rustka-admin-token", token.value));
  session().then((s) => {
    if (state.users && !s.user) showSignIn(); else route();
  }, (err) => { status(err.message, true); route(); });
});
