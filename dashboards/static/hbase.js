// PinLater dashboard: the HBase panel of the following-feed tasks (GET
// /api/hbase): each cluster's health and write backlog, fan-out lag, trims.
// app.js polls it with the rest of the page and calls PL.renderHBase.
"use strict";

(function () {
  const PL = window.PL;
  const el = PL.el;
  const $ = (id) => document.getElementById(id);

  const count = (label, n, field) => el("span", { "data-field": field }, label + " ", el("b", {}, PL.fmtInt(n)));

  function health(c, settingsError) {
    if (settingsError) return ["unknown", "", "HBase settings unusable"];
    if (c.reachable === null) return ["checking…", "", "no probe has finished yet"];
    return c.reachable ? ["up", "ok", `listed its tables at ${PL.fmtTime(c.checked_at_ms)}`]
      : ["down", "bad", `failed at ${PL.fmtTime(c.checked_at_ms)}`];
  }

  function clusterCard(c, settingsError) {
    const [text, tone, title] = health(c, settingsError);
    const b = c.backlog;
    return el("div", { class: "shard " + (c.reachable === false ? "down" : "up"), "data-cluster": c.name },
      el("div", { class: "shard-head" }, el("b", {}, c.name),
        el("span", { class: "pill " + tone, "data-field": "health", title }, text),
        c.address ? el("span", { class: "muted" }, c.address) : null,
        c.reachable ? el("span", { class: "muted", "data-field": "latency", title: "time to list the tables" },
          `latency ${c.latency_ms} ms`) : null),
      el("div", { class: "shard-counts", title: `queue ${b.queue}` + (b.config_error ? ": " + b.config_error : "") },
        el("span", {}, "write backlog:"), count("pending now", b.pending_now, "pending_now"),
        count("pending later", b.pending_future, "pending_future"), count("running", b.running, "running"),
        count("failed", b.failed, "failed")),
      c.reachable === false ? el("div", { class: "error", "data-field": "error" }, c.error) : null);
  }

  function stat(key, label, value, detail, title) {
    return el("div", { class: "total", "data-feed": key, title },
      el("span", { class: "label" }, label), el("span", { class: "value" }, value),
      el("span", { class: "muted detail" }, detail));
  }

  PL.renderHBase = function (panel) {
    const error = $("hbase-settings-error");
    error.textContent = panel.settings_error ? "HBase settings unusable: " + panel.settings_error : "";
    error.hidden = !panel.settings_error;
    $("hbase-clusters").replaceChildren(...panel.clusters.map((c) => clusterCard(c, panel.settings_error)));
    const f = panel.fanout, t = panel.trim, s = panel.trim_sweep;
    const sweeping = (s.pending || 0) + (s.running || 0) > 0;
    $("hbase-feeds").replaceChildren(
      stat("lag", "Fan-out lag", PL.fmtAge(f.lag_ms),
        `${PL.fmtInt(f.pending_now)} due · ${PL.fmtInt(f.pending_future)} later · ${PL.fmtInt(f.running)} running`,
        `queue ${f.queue}: how long its oldest due job has waited`),
      stat("trims", "Trims done", PL.fmtInt(t.succeeded),
        `${PL.fmtInt(t.pending)} pending · ${PL.fmtInt(t.failed)} failed`,
        `queue ${t.queue}: succeeded jobs still kept (retention)`),
      stat("sweep", "Trim sweep", sweeping ? "in progress" : "idle",
        `${PL.fmtInt(s.pending)} pending · ${PL.fmtInt(s.running)} running`, `queue ${s.queue}`));
  };

  PL.hbaseFailed = function (message) {
    $("hbase-clusters").replaceChildren(el("p", { class: "error" }, "Cannot read the HBase panel: " + message));
  };
})();
