// The rustka console's pages (docs/console.md). Plain JavaScript, no build step.
// Every value from the broker is inserted as text (text nodes, textContent): keys,
// values and names are attacker-controlled and must never become markup.
"use strict";

const state = { timer: null, tail: null, csrf: null, admin: false, route: "" };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name === "onclick") node.addEventListener("click", value);
    else if (name === "onsubmit") node.addEventListener("submit", value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

function status(text, isError) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = isError ? "error" : "";
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function session() {
  const body = await api("/api/session");
  state.csrf = body.csrf;
  state.admin = body.admin;
  return body;
}

async function adminPost(path, body, question) {
  if (!window.confirm(question)) return null;
  if (!state.csrf) await session();
  const token = document.getElementById("admin-token").value;
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: {
      "content-type": "application/json",
      "authorization": "Bearer " + token,
      "x-console-csrf": state.csrf,
    },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) { status(answer.error || response.statusText, true); return null; }
  status("done: " + path);
  return answer;
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
  const canvas = el("canvas", { id: id, "data-points": "0" });
  const legend = el("div", { class: "legend", id: id + "-legend" });
  box.append(canvas, legend);
  return {
    node: box,
    draw(points) {
      const ratio = window.devicePixelRatio || 1;
      const width = canvas.clientWidth || 600, height = canvas.clientHeight || 220;
      canvas.width = width * ratio; canvas.height = height * ratio;
      const ctx = canvas.getContext("2d");
      ctx.scale(ratio, ratio);
      ctx.clearRect(0, 0, width, height);
      const left = 56, right = 10, top = 10, bottom = 22;
      let max = 1;
      for (const p of points) for (const s of series) max = Math.max(max, p[s.key] || 0);
      ctx.strokeStyle = "#d9dee7"; ctx.fillStyle = "#667085"; ctx.font = "11px sans-serif";
      for (let i = 0; i <= 4; i += 1) {
        const y = top + (height - top - bottom) * i / 4;
        ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(width - right, y); ctx.stroke();
        ctx.fillText(fmtRate(max * (4 - i) / 4), 4, y + 4);
      }
      if (points.length) {
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
      }
      canvas.dataset.points = String(points.length);
      clear(legend);
      const latest = points.length ? points[points.length - 1] : {};
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

function topicsPage(main) {
  const holder = el("div");
  const create = el("form", { class: "inline", onsubmit: async (event) => {
    event.preventDefault();
    const name = create.querySelector("[name=name]").value;
    const partitions = parseInt(create.querySelector("[name=partitions]").value, 10);
    const done = await adminPost("/api/admin/topics", { name, partitions },
      "Create topic " + name + " with " + partitions + " partitions?");
    if (done) refresh();
  } }, el("input", { name: "name", placeholder: "topic name", required: "" }),
  el("input", { name: "partitions", type: "number", min: "1", value: "1" }),
  el("button", { type: "submit" }, "Create topic"));
  main.append(el("h1", {}, "Topics"), holder,
    el("div", { class: "admin-box" }, el("h2", {}, "Create a topic"), create));
  const refresh = async () => {
    const body = await api("/api/topics");
    clear(holder);
    holder.append(table(["Topic", { label: "Partitions", num: true }, { label: "Log start", num: true },
      { label: "Log end", num: true }, { label: "Records", num: true }, { label: "Size", num: true },
      { label: "Records/s", num: true }, "Configs"],
    body.topics.map(t => el("tr", { "data-topic": t.name }, el("td", {}, link(topicHref(t.name), t.name)),
      td(t.partitions, true), td(t.log_start_offset, true), td(t.end_offset, true), td(t.records, true),
      td(fmtBytes(t.size_bytes), true), td(fmtRate(t.records_in_per_s), true),
      td(Object.entries(t.configs).map(([k, v]) => k + "=" + v).join(", ")))), "topics-table"));
  };
  return refresh;
}

function topicPage(main, name) {
  const chart = lineChart("topic-chart", [{ key: "records_in", label: "records in/s", color: "#2f6fde" }]);
  const parts = el("div"), configs = el("div");
  const grow = el("input", { type: "number", min: "1", name: "partitions" });
  const admin = el("div", { class: "admin-box" }, el("h2", {}, "Admin"),
    el("div", { class: "toolbar" }, grow, el("button", { onclick: async () => {
      const count = parseInt(grow.value, 10);
      await adminPost("/api/admin/topics/" + encodeURIComponent(name) + "/partitions",
        { partitions: count }, "Grow topic " + name + " to " + count + " partitions?");
    } }, "Add partitions"),
    el("button", { class: "danger", onclick: async () => {
      const done = await adminPost("/api/admin/topics/" + encodeURIComponent(name) + "/delete",
        { confirm: name }, "Delete topic " + name + " and all its records? This cannot be undone.");
      if (done) location.hash = "#/topics";
    } }, "Delete topic")));
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

function messagesPage(main, name, partition) {
  const base = "/api/topics/" + encodeURIComponent(name) + "/partitions/" + partition;
  const mode = el("select", { name: "mode", id: "mode" }, el("option", { value: "latest" }, "latest N"),
    el("option", { value: "offset" }, "from offset"), el("option", { value: "timestamp" }, "from time (ms)"));
  const at = el("input", { name: "at", id: "at", value: "50", size: "16" });
  const format = el("select", { name: "format", id: "format" }, el("option", { value: "text" }, "text"),
    el("option", { value: "json" }, "JSON"), el("option", { value: "hex" }, "hex"));
  const info = el("p", { class: "muted", id: "messages-info" });
  const body = el("tbody", { id: "messages-body" });
  const tailButton = el("button", { class: "secondary", type: "button", id: "tail-button" }, "Live tail");
  let records = [];
  const row = (r) => el("tr", { "data-offset": r.offset }, td(r.offset, true), td(fmtTime(r.timestamp)),
    fieldCell(r.key, format.value), fieldCell(r.value, format.value),
    el("td", {}, ...r.headers.map(h => el("div", {}, h.key + ": " + (showField(h.value, format.value) ?? "null")))));
  const render = () => { clear(body); for (const r of records) body.append(row(r)); };
  format.addEventListener("change", render);
  const load = async () => {
    const param = mode.value === "latest" ? "latest" : mode.value;
    const page = await api(base + "/messages?" + param + "=" + encodeURIComponent(at.value));
    records = page.records;
    info.textContent = "offsets " + page.log_start_offset + " to " + page.end_offset + "; showing " +
      page.records.length + " from " + page.first_offset + (page.truncated ? " (cut at the byte limit)" : "");
    render();
  };
  const form = el("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); load().catch(err => status(err.message, true)); } },
    mode, at, el("label", {}, "show as "), format, el("button", { type: "submit" }, "Load"), tailButton);
  tailButton.addEventListener("click", () => {
    if (state.tail) { stopTail(); tailButton.textContent = "Live tail"; return; }
    const source = new EventSource(base + "/tail");
    state.tail = source;
    tailButton.textContent = "Stop tail";
    source.addEventListener("records", (event) => {
      const data = JSON.parse(event.data);
      for (const r of data.records) { records.unshift(r); body.prepend(row(r)); }
      while (records.length > 500) { records.pop(); body.removeChild(body.lastChild); }
      info.textContent = "live: next offset " + data.next_offset;
    });
    source.addEventListener("error", () => status("tail interrupted; retrying", true));
  });
  main.append(el("h1", {}, "Messages of ", link(topicHref(name), name), " partition " + partition), form, info,
    table([{ label: "Offset", num: true }, "Timestamp", "Key", "Value", "Headers"], []));
  main.querySelector("table").replaceChild(body, main.querySelector("tbody"));
  load().catch(err => status(err.message, true));
  return null;
}

function groupsPage(main) {
  const holder = el("div");
  main.append(el("h1", {}, "Groups"), holder);
  return async () => {
    const body = await api("/api/groups");
    clear(holder);
    holder.append(table(["Group", "Type", "Protocol", "State", { label: "Members", num: true },
      { label: "Partitions", num: true }, { label: "Lag", num: true }],
    body.groups.map(g => el("tr", { "data-group": g.group, "data-type": g.type },
      el("td", {}, link(groupHref(g.group), g.group)), td(g.type),
      td(g.protocol_type), td(g.state), td(g.members, true), td(g.partitions, true),
      el("td", { class: "num lag" + (g.lag > 0 ? " lag-high" : "") }, g.lag))), "groups-table"));
  };
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
  const topic = el("input", { name: "topic", placeholder: "topic" });
  const to = el("select", { name: "to" }, el("option", { value: "earliest" }, "earliest"),
    el("option", { value: "latest" }, "latest"), el("option", { value: "offset" }, "offset"));
  const offset = el("input", { name: "offset", type: "number", min: "0", placeholder: "offset" });
  const admin = el("div", { class: "admin-box" }, el("h2", {}, "Reset offsets"), el("div", { class: "toolbar" },
    topic, to, offset, el("button", { class: "danger", onclick: async () => {
      const target = to.value === "offset" ? parseInt(offset.value, 10) : to.value;
      await adminPost("/api/admin/groups/" + encodeURIComponent(name) + "/reset-offsets",
        { topic: topic.value, to: target }, "Reset group " + name + " on " + topic.value + " to " + target + "?");
    } }, "Reset")));
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

function route() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
  stopTail();
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
  else refresh = overviewPage(main);
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.id === "nav-" + nav);
  if (refresh) {
    const tick = () => refresh().then(() => status("updated " + new Date().toLocaleTimeString()),
      err => status(err.message, true));
    tick();
    state.timer = setInterval(tick, 2000);
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  const token = document.getElementById("admin-token");
  token.value = sessionStorage.getItem("rustka-admin-token") || "";
  token.addEventListener("change", () => sessionStorage.setItem("rustka-admin-token", token.value));
  session().catch(err => status(err.message, true));
  route();
});
