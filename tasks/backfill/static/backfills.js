// PinLater dashboard: the Backfills panel (GET /api/backfills,
// tasks.backfill.panel): each recent bulk backfill run's kind, cluster,
// progress bar, pages done of total, rate, time left and state. It registers
// with PL.panels; the dashboard's app.js polls it with the rest of the page.
"use strict";

(function () {
  const PL = window.PL;
  const el = PL.el;
  const $ = (id) => document.getElementById(id);
  const TONE = { running: "ok", paused: "warn", finished: "", failed: "bad", cancelled: "warn" };

  function left(run) {
    if (run.state === "finished") return "done";
    if (run.state === "failed" || run.state === "cancelled") return "ended";
    if (run.state === "paused") return "paused";
    return run.eta_s === null ? "—" : PL.fmtAge(run.eta_s * 1000);
  }

  function row(run) {
    return el("tr", { "data-run": String(run.id), class: run.state },
      el("td", {}, String(run.id)),
      el("td", { "data-field": "kind" }, run.kind),
      el("td", { "data-field": "cluster" }, run.cluster),
      el("td", { class: "bar" }, el("progress", { max: 1, value: run.fraction })),
      el("td", { "data-field": "pages" }, `${PL.fmtInt(run.pages_done)} / ${PL.fmtInt(run.total_pages)}`),
      el("td", { "data-field": "rate", title: "over the last minute" },
        run.pages_per_s === null ? "—" : `${PL.fmtRate(run.pages_per_s)} pages/s · ${PL.fmtRate(run.users_per_s)} users/s`),
      el("td", { "data-field": "left" }, left(run)),
      el("td", {}, el("span", { class: "pill " + (TONE[run.state] || ""), "data-field": "state" }, run.state)));
  }

  function render(panel) {
    const error = $("backfills-error");
    error.textContent = panel.error || "";
    error.hidden = !panel.error;
    const head = el("tr", {}, ["Run", "Kind", "Cluster", "Progress", "Pages", "Rate", "Time left", "State"]
      .map((h) => el("th", {}, h)));
    const rows = panel.runs.length ? panel.runs.map(row)
      : [el("tr", {}, el("td", { colspan: 8, class: "muted" }, panel.checked_at_ms ? "No backfill runs yet." : "Loading…"))];
    document.querySelector("#backfills tbody").replaceChildren(head, ...rows);
  }

  function failed(message) {
    const error = $("backfills-error");
    error.textContent = "Cannot read the backfills: " + message;
    error.hidden = false;
  }

  PL.panels.push({ path: "/api/backfills", render, failed });
})();
