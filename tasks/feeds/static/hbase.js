// PinLater dashboard: the HBase panel of the following-feed tasks (GET
// /api/hbase, tasks.feeds.panel): each cluster's health (its Thrift1 and
// Thrift2 servers) and write backlog, fan-out lag, trims. It registers with
// PL.panels; the dashboard's app.js polls it with the rest of the page.
"use strict";

(function () {
  const PL = window.PL;
  const el = PL.el;
  const $ = (id) => document.getElementById(id);

  const count = (label, n, field) => el("span", { "data-field": field }, label + " ", el("b", {}, PL.fmtInt(n)));

  // Each cluster has two Thrift servers: Thrift1 serves the scans of many rows
  // (trim sweeps, backfills), Thrift2 every write, feed read, lookup and table
  // change, so one can be down while the other is up. Thrift1's health is
  // in the cluster's own fields, Thrift2's in c.thrift2; on the page the same
  // data-field names tell them apart by a "thrift2-" prefix.
  const SERVERS = [
    { key: "thrift1", label: "Thrift1 · scans", serves: "trim sweeps' and backfills' scans", probe: "listed its tables",
      get: (c) => c, field: "" },
    { key: "thrift2", label: "Thrift2 · writes, reads", serves: "every write, feed read, lookup and table change", probe: "answered its server type",
      get: (c) => c.thrift2, field: "thrift2-" },
  ];

  function health(s, settingsError, probe) {
    if (settingsError) return ["unknown", "", "HBase settings unusable"];
    if (s.reachable === null) return ["checking…", "", "no probe has finished yet"];
    return s.reachable ? ["up", "ok", `${probe} at ${PL.fmtTime(s.checked_at_ms)}`]
      : ["down", "bad", `failed at ${PL.fmtTime(s.checked_at_ms)}`];
  }

  // The cluster as a whole: what still works when one of its servers is down.
  function verdict(c, settingsError) {
    const reads = c.reachable, writes = c.thrift2.reachable;
    if (settingsError) return ["unknown", "", "HBase settings unusable"];
    if (reads === false && writes === false) return ["down", "bad", "both Thrift servers are down: nothing reaches this cluster"];
    if (writes === false) {
      return ["writes down", "bad", `Thrift2 is down: writes to ${c.name} fail and wait in ${c.write_queue}; ` +
        "feed reads and lookups are answered by the other cluster"];
    }
    if (reads === false) return ["scans down", "bad", "Thrift1 is down: trim sweeps and backfills wait; writes and reads go through Thrift2"];
    if (reads === null || writes === null) return ["checking…", "", "no probe has finished yet"];
    return ["up", "ok", "both Thrift servers answer"];
  }

  function serverRow(server, c, settingsError) {
    const s = server.get(c);
    const [text, tone, title] = health(s, settingsError, server.probe);
    return [
      el("div", { class: "shard-head", "data-server": server.key },
        el("span", { class: "server-label", title: server.serves }, server.label),
        el("span", { class: "pill " + tone, "data-field": server.field + "health", title }, text),
        s.address ? el("span", { class: "muted" }, s.address) : null,
        s.reachable ? el("span", { class: "muted", "data-field": server.field + "latency",
          title: `time it took: ${server.probe}` }, `latency ${s.latency_ms} ms`) : null),
      s.reachable === false ? el("div", { class: "error", "data-field": server.field + "error" }, s.error) : null,
    ];
  }

  // How the cluster's feed rows are capped: by its compactions (the trimming
  // coprocessor) or by trim jobs and the sweep.
  function trimmingRow(t) {
    if (!t || t.mode === null) {
      return el("div", { class: "shard-counts", "data-field": "trimming" }, el("span", {}, "trimming:"),
        el("span", { class: "muted", title: t && t.error ? t.error : "" }, "unknown"));
    }
    const byCompaction = t.mode === "compaction";
    return el("div", { class: "shard-counts", "data-field": "trimming",
      title: byCompaction ? "the feed table is attached to the trimming coprocessor; counts since the region server started"
        : "the feed table has no trimming coprocessor: fan-out trims and the sweep cap the rows" },
      el("span", {}, "trimming:"),
      el("span", { "data-field": "trim-mode" }, byCompaction ? `by compaction, cap ${PL.fmtInt(t.cap)}` : "by the sweep"),
      byCompaction && t.cells_dropped !== null ? count("cells dropped", t.cells_dropped, "cells_dropped") : null,
      byCompaction && t.rows_trimmed !== null ? count("rows trimmed", t.rows_trimmed, "rows_trimmed") : null,
      t.error ? el("span", { class: "error" }, t.error) : null);
  }

  function clusterCard(c, settingsError) {
    const [text, tone, title] = verdict(c, settingsError);
    const b = c.backlog;
    return el("div", { class: "shard " + (tone === "bad" ? "down" : "up"), "data-cluster": c.name },
      el("div", { class: "shard-head" }, el("b", {}, c.name),
        el("span", { class: "pill " + tone, "data-field": "verdict", title }, text)),
      SERVERS.flatMap((server) => serverRow(server, c, settingsError)),
      el("div", { class: "shard-counts", title: `queue ${b.queue}` + (b.config_error ? ": " + b.config_error : "") },
        el("span", {}, "write backlog:"), count("pending now", b.pending_now, "pending_now"),
        count("pending later", b.pending_future, "pending_future"), count("running", b.running, "running"),
        count("failed", b.failed, "failed")),
      trimmingRow(c.trimming));
  }

  function stat(key, label, value, detail, title) {
    return el("div", { class: "total", "data-feed": key, title },
      el("span", { class: "label" }, label), el("span", { class: "value" }, value),
      el("span", { class: "muted detail" }, detail));
  }

  function render(panel) {
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
  }

  function failed(message) {
    $("hbase-clusters").replaceChildren(el("p", { class: "error" }, "Cannot read the HBase panel: " + message));
  }

  PL.panels.push({ path: "/api/hbase", render, failed });
})();
