// PinLater dashboard: polls the JSON API and renders it. No framework, no
// build step, nothing fetched from anywhere but this server. Data is always
// put into the page as text (textContent), never as HTML.
"use strict";

const PL = (window.PL = {
  config: null,
  snap: null,
  selected: null, // queue shown in the detail panel
  failures: 0,
  // The installed panels' scripts each push {path, render(answer), failed(message)}.
  panels: [],
});

// -- helpers ----------------------------------------------------------------
PL.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else if (k.startsWith("data-") || k === "title" || k === "id" || k === "colspan" || k === "role") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
};
const el = PL.el;

// The server sends null for what it does not know (and for NaN or Infinity,
// which JSON cannot carry): shown as a dash, never as "NaN".
const known = (x) => typeof x === "number" && Number.isFinite(x);
PL.MAX_RATE = 1e9; // pinlater.limits.MAX_DEQUEUE_RATE
PL.MAX_RUNNING = 1000000; // pinlater.limits.MAX_RUNNING_CAP
PL.fmtInt = (n) => (known(n) ? n.toLocaleString("en-US") : "—");
PL.fmtRate = (x) => (!known(x) ? "—" : x === 0 ? "0" : x < 10 ? x.toFixed(2) : x.toFixed(1));
PL.fmtAge = function (ms) {
  if (!known(ms)) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
};
PL.fmtTime = function (ms) {
  if (!ms) return "—";
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
};
PL.rateText = (q) => (q.config_error ? "config error" : q.paused ? "paused"
  : known(q.max_dequeue_rate) ? q.max_dequeue_rate + "/s" : "unlimited");

PL.auth = {
  get token() { return sessionStorage.getItem("pl-token") || ""; },
  get operator() { return localStorage.getItem("pl-operator") || ""; },
};

// Every call to the server. Errors carry the server's message.
PL.api = async function (path, options) {
  const opts = options || {};
  const headers = { Accept: "application/json" };
  if (PL.auth.token) headers["X-PinLater-Token"] = PL.auth.token;
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    headers["X-PinLater-Operator"] = PL.auth.operator;
  }
  const response = await fetch(path, {
    method: opts.body !== undefined ? "POST" : "GET",
    headers,
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
    cache: "no-store",
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = new Error((data.error && data.error.message) || `HTTP ${response.status}`);
    err.status = response.status;
    err.code = data.error && data.error.code;
    throw err;
  }
  return data;
};

PL.toast = function (text, bad) {
  const t = document.getElementById("toast");
  t.textContent = text;
  t.className = "toast" + (bad ? " bad" : "");
  t.hidden = false;
  clearTimeout(PL.toastTimer);
  PL.toastTimer = setTimeout(() => (t.hidden = true), bad ? 9000 : 5000);
};

function banner(text) {
  const b = document.getElementById("banner");
  b.textContent = text || "";
  b.hidden = !text;
}

// -- rendering ----------------------------------------------------------------
const STATES = [
  ["pending_now", "Pending now"], ["pending_future", "Pending later"], ["running", "Running"],
  ["succeeded", "Succeeded"], ["failed", "Failed"],
];

const EVENTS = [
  ["enqueued", "enqueued"], ["dequeued", "dequeued"], ["succeeded", "succeeded"], ["failed", "failed"],
  ["claims_expired", "claim timeouts"], ["retried_by_operator", "retried by operators"],
  ["cancelled", "cancelled"], ["duplicates", "duplicates (unique keys held)"],
];
// What an absent parameter of a control meant, for the audit log.
const DEFAULTS = { rate: "unlimited", priority: "all", run_after_ms: "now", body_regex: "any" };

function renderTotals(snap) {
  const box = document.getElementById("totals");
  box.replaceChildren(...STATES.map(([key, label]) =>
    el("div", { class: "total " + key, "data-total": key },
      el("span", { class: "label" }, label), el("span", { class: "value" }, PL.fmtInt(snap.totals[key])))));
}

// "down" unless the shard set says it is out for another reason than being
// unreachable (it refuses writes, or kept failing).
function shardHealth(s, up) {
  if (up) return "up";
  return s.out_reason && s.out_reason !== "unavailable" ? s.out_reason : "down";
}

function renderShards(snap) {
  const cards = snap.shards.map((s) => {
    const up = s.healthy && s.counted;
    const counts = s.counts
      ? STATES.map(([key, label]) => el("span", { "data-field": key }, label.toLowerCase() + " ", el("b", {}, PL.fmtInt(s.counts[key]))))
      : [el("span", { class: "muted" }, "jobs not counted while the shard is down")];
    return el("div", { class: "shard " + (up ? "up" : "down"), "data-shard": s.id },
      el("div", { class: "shard-head" }, el("b", {}, s.id),
        el("span", { class: "pill " + (up ? "ok" : "bad"), "data-field": "health" }, shardHealth(s, up)),
        el("span", { class: "muted", title: "last change of health" }, "since " + PL.fmtTime(s.changed_at_ms))),
      el("div", { class: "shard-counts" }, counts),
      s.last_error && !up ? el("div", { class: "error", "data-field": "error" }, s.error || s.last_error) : null);
  });
  document.getElementById("shards").replaceChildren(...cards);
}

function queueRow(q) {
  const r = q.rates || {}, counts = q.counts || {}, events = q.events || {};
  const cells = [
    el("td", { class: "name", "data-field": "name" }, el("button", { class: "link", onclick: () => PL.select(q.name) }, q.name)),
    el("td", { "data-field": "rate" }, el("span", { class: "pill " + (q.paused || q.config_error ? "bad" : ""), title: q.config_error }, PL.rateText(q))),
    ...STATES.map(([key]) => el("td", { "data-field": key, class: key === "failed" && counts.failed ? "hot" : "" },
      PL.fmtInt(counts[key]) + (key === "running" && known(q.max_running) ? " / " + PL.fmtInt(q.max_running) : ""))),
    el("td", { "data-field": "oldest" }, q.oldest_pending ? PL.fmtAge(q.oldest_pending.age_ms) : "—"),
    ...["enqueued", "dequeued", "succeeded", "failed", "claims_expired"].map((e) =>
      el("td", { class: "rate-col", "data-field": "rate_" + e, title: PL.fmtInt(events[e]) + " in the window" }, PL.fmtRate(r[e]))),
  ];
  return el("tr", { "data-queue": q.name, class: q.name === PL.selected ? "selected" : "" }, cells);
}

function renderQueues(snap) {
  // One odd queue must not hide the others: a row that cannot be drawn says so.
  const rows = snap.queues.map((q) => {
    try {
      return queueRow(q);
    } catch (err) {
      return el("tr", { "data-queue": q.name }, el("td", { class: "name", "data-field": "name" }, String(q.name)),
        el("td", { class: "error", colspan: 12 }, "cannot show this queue: " + err.message));
    }
  });
  document.querySelector("#queues tbody").replaceChildren(...rows);
  document.getElementById("no-queues").hidden = snap.queues.length > 0;
  document.getElementById("rate-window").textContent = `rates over the last ${snap.rate_window_minutes} min`;
}

function countsTable(table, title, rows) {
  const head = el("tr", {}, el("th", { class: "name" }, title), STATES.map(([, label]) => el("th", {}, label)));
  const body = rows.map(([name, c]) => el("tr", { "data-row": name }, el("td", { class: "name" }, name),
    STATES.map(([key]) => el("td", { "data-field": key }, PL.fmtInt(c[key])))));
  table.replaceChildren(el("thead", {}, head), el("tbody", {}, body));
}

function renderDetail(snap) {
  const panel = document.getElementById("detail");
  const q = snap.queues.find((x) => x.name === PL.selected);
  panel.hidden = !q;
  if (!q) return;
  document.getElementById("detail-name").textContent = q.name;
  const pill = document.getElementById("detail-rate");
  pill.textContent = PL.rateText(q);
  pill.className = "pill " + (q.paused || q.config_error ? "bad" : "ok");
  document.getElementById("detail-config").textContent =
    `${q.priorities ?? "?"} priorities · claim timeout ${PL.fmtAge(q.claim_timeout_ms)} · retry policy ${q.retry ?? "?"}` +
    (known(q.max_running) ? ` · at most ${PL.fmtInt(q.max_running)} running at once` : " · no concurrency cap") +
    (known(q.key_max_running) ? ` · at most ${PL.fmtInt(q.key_max_running)} of a key running at once` : "") +
    (known(q.key_rate) ? ` · at most ${q.key_rate} jobs/s of a key` : "") +
    (q.unique_succeeded_ms ? ` · a unique key held ${PL.fmtInt(q.unique_succeeded_ms / 1000)} s after success` : "");
  const configError = document.getElementById("detail-config-error");
  configError.textContent = q.config_error || "";
  configError.hidden = !q.config_error;
  countsTable(document.getElementById("detail-priorities"), "Priority",
    Object.entries(q.by_priority).map(([p, c]) => ["p" + p, c]));
  countsTable(document.getElementById("detail-shards"), "Shard", Object.entries(q.by_shard));
  const o = q.oldest_pending;
  document.getElementById("detail-oldest").textContent = o
    ? `Oldest runnable job ${o.descriptor} has waited ${PL.fmtAge(o.age_ms)} (run after ${PL.fmtTime(o.run_after_ms)}).`
    : "No runnable job is waiting.";
  document.getElementById("detail-rates").textContent = `Last ${snap.rate_window_minutes} min: ` + EVENTS.map(([e, label]) =>
    `${label} ${PL.fmtRate((q.rates || {})[e])}/s (${PL.fmtInt((q.events || {})[e])})`).join(" · ");
  for (const sel of document.querySelectorAll(".priority-select")) PL.fillPriorities(sel, q.priorities || 1, "all");
}

PL.fillPriorities = function (select, n, allLabel) {
  if (select.dataset.n === String(n)) return;
  const keep = select.value;
  select.replaceChildren(el("option", { value: "" }, allLabel),
    ...Array.from({ length: n }, (_, i) => el("option", { value: String(i + 1) }, String(i + 1))));
  select.value = keep && Number(keep) <= n ? keep : "";
  select.dataset.n = String(n);
};

function renderStatus(snap) {
  const up = snap.shards.filter((s) => s.healthy && s.counted).length;
  const pill = document.getElementById("cluster-status");
  pill.textContent = `${up}/${snap.shards.length} shards up`;
  pill.className = "pill " + (up === snap.shards.length ? "ok" : "bad");
  document.getElementById("updated").textContent =
    `updated ${PL.fmtTime(snap.taken_at_ms).slice(11)} · read in ${Math.round(snap.took_ms)} ms`;
  const problems = [];
  if (snap.shards_down.length) problems.push(`Shard ${snap.shards_down.join(", ")} down: its jobs are not in these numbers; the other shards are.`);
  const lost = snap.unregistered_queues || [];
  if (lost.length) problems.push(`The shards hold jobs of ${lost.length === 1 ? "a queue" : "queues"} with no config ` +
    `(${lost.map((q) => `${q.name} on ${q.shards.join(", ")}`).join("; ")}): they are not in these numbers and no ` +
    "call reaches them. If they were not just deleted, the control store lost its data: `pinlater restore-queues`.");
  if (!snap.control_store.ok) problems.push(`Control store unreachable (${snap.control_store.error}): ` +
    (snap.control_store.error.startsWith("queue configs") ? "queues may be missing or stale, " : "") + "rates missing.");
  banner(problems.join(" "));
  const select = document.getElementById("jobs-queue");
  const names = snap.queues.map((q) => q.name);
  if (select.dataset.names !== names.join(",")) {
    const keep = select.value;
    select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(keep)) select.value = keep;
    select.dataset.names = names.join(",");
  }
  const jq = snap.queues.find((q) => q.name === select.value);
  if (jq && jq.priorities) PL.fillPriorities(document.getElementById("jobs-priority"), jq.priorities, "all");
}

function renderProgress(ops) {
  const box = document.getElementById("progress");
  if (!ops.length) return box.replaceChildren(el("p", { class: "muted" }, "No long operations reported."));
  box.replaceChildren(...ops.map((op) => el("div", { class: "op " + op.status + (op.stale ? " stale" : ""), "data-op": op.id },
    el("div", {}, el("b", {}, op.title), " ", el("span", { class: "pill" }, op.stale ? "stale" : op.status), " ",
      el("span", { class: "muted" }, `${PL.fmtInt(op.done)}${op.total !== null ? " / " + PL.fmtInt(op.total) : ""} · updated ${PL.fmtTime(op.updated_at_ms)}`)),
    op.fraction !== null ? el("progress", { max: 1, value: op.fraction }) : null,
    op.detail ? el("div", { class: "muted" }, op.detail) : null)));
}

function renderAudit(entries) {
  const rows = entries.map((e) => {
    const params = Object.entries(e.params || {}).map(([k, v]) => `${k}=${v === null ? DEFAULTS[k] || "none" : v}`).join(" ");
    const result = e.ok ? Object.entries(e.result || {}).filter(([k]) => k !== "audited").map(([k, v]) => `${k}=${v}`).join(" ") : "error: " + e.error;
    return el("tr", { class: e.ok ? "" : "bad" }, el("td", {}, PL.fmtTime(e.at_ms)), el("td", {}, e.operator),
      el("td", { class: "muted" }, e.remote), el("td", {}, e.action), el("td", {}, e.queue), el("td", {}, params), el("td", {}, result));
  });
  const head = el("tr", {}, ["When", "Who", "From", "Action", "Queue", "Parameters", "Result"].map((h) => el("th", {}, h)));
  document.querySelector("#audit tbody").replaceChildren(head, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No operator actions yet."))]));
}

// -- polling ----------------------------------------------------------------------
PL.refresh = async function () {
  // Progress, audit and rates live in the control store, the panels' data elsewhere:
  // if one fails it fails alone and the shards' numbers are still shown.
  const [progress, audit, rates, ...panels] = await Promise.allSettled(
    [PL.api("/api/progress"), PL.api("/api/audit?limit=30"), PL.api("/api/rates?minutes=60"),
     ...PL.panels.map((p) => PL.api(p.path))]);
  PL.panels.forEach((p, i) => {
    if (panels[i].status === "fulfilled") p.render(panels[i].value);
    else p.failed(panels[i].reason.message);
  });
  if (rates.status === "fulfilled") PL.renderRates(rates.value);
  else PL.ratesFailed(rates.reason.message);
  if (progress.status === "fulfilled") renderProgress(progress.value.operations);
  else document.getElementById("progress").replaceChildren(el("p", { class: "error" }, "Cannot read progress: " + progress.reason.message));
  if (audit.status === "fulfilled") renderAudit(audit.value.entries);
  else document.querySelector("#audit tbody").replaceChildren(el("tr", {}, el("td", { class: "error" }, "Cannot read the audit log: " + audit.reason.message)));
  try {
    const snap = await PL.api("/api/overview");
    PL.snap = snap;
    PL.failures = 0;
    renderStatus(snap);
    renderTotals(snap);
    renderShards(snap);
    renderQueues(snap);
    renderDetail(snap);
    document.body.classList.remove("stale");
  } catch (err) {
    PL.failures += 1;
    document.body.classList.add("stale");
    const when = PL.snap ? ` Showing data from ${PL.fmtTime(PL.snap.taken_at_ms)}.` : "";
    if (err.status === 401 || err.status === 403) {
      banner(`${err.message}: enter the operator token (top right) to see the dashboard.`);
      document.getElementById("auth").open = true;
    } else banner(`Cannot update: ${err.message}.${when}`);
  }
};

PL.select = function (name) {
  PL.selected = name;
  if (PL.snap) { renderQueues(PL.snap); renderDetail(PL.snap); }
  document.getElementById("detail").scrollIntoView({ behavior: "smooth", block: "start" });
};

async function loop() {
  if (!document.hidden) await PL.refresh();
  // Back off while the server is unreachable; the shards are read at most once per refresh anyway.
  const wait = (PL.config ? PL.config.refresh_ms : 2000) * Math.min(8, 1 + PL.failures);
  setTimeout(loop, wait);
}

// The server gives Flower's address only with the operator token: read again on signing in or out.
PL.loadConfig = async function () {
  try {
    PL.config = await PL.api("/api/config");
    const flower = document.getElementById("flower-link");
    flower.hidden = !PL.config.flower_url;
    flower.href = PL.config.flower_url || "#";
    document.getElementById("controls-off").hidden = PL.config.controls_enabled;
  } catch (err) {
    banner("Cannot reach the dashboard server: " + err.message);
  }
};

document.addEventListener("DOMContentLoaded", async () => {
  await PL.loadConfig();
  document.addEventListener("visibilitychange", () => { if (!document.hidden) PL.refresh(); });
  document.getElementById("detail-close").addEventListener("click", () => { PL.selected = null; PL.refresh(); });
  loop();
});
