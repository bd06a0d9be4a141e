// PinLater dashboard: the rate charts (GET /api/rates): per queue, a small
// SVG line chart of jobs enqueued, dequeued, succeeded and failed per second
// in each minute of the last hour. app.js polls it with the rest of the page
// and calls PL.renderRates. Colours come from app.css classes (the page's
// content security policy allows no inline styles).
"use strict";

(function () {
  const PL = window.PL;
  const el = PL.el;
  const $ = (id) => document.getElementById(id);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const LINES = [["enqueued", "enqueued"], ["dequeued", "dequeued"], ["succeeded", "succeeded"], ["failed", "failed"]];
  // The drawing's own units; the SVG scales to its card's width.
  const W = 300, TOP = 14, BOTTOM = 78, H = 92;

  // An SVG element; children are nodes or text (always as text, never as markup).
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    node.append(...children);
    return node;
  }

  // A round number at or above the highest point, so the axis label reads well.
  function niceMax(x) {
    if (!(x > 0)) return 1;
    const step = Math.pow(10, Math.floor(Math.log10(x)));
    return [1, 2, 5, 10].map((m) => m * step).find((m) => m >= x);
  }

  const fmtRate = (x) => PL.fmtRate(x) + "/s";

  function describe(q, windowText) {
    const latest = LINES.map(([e, label]) => `${label} ${fmtRate(q.rates[e][q.rates[e].length - 1])}`).join(", ");
    const totals = LINES.map(([e, label]) => `${PL.fmtInt(q.events[e])} ${label}`).join(", ");
    return `${q.name}: latest minute ${latest}; ${windowText}: ${totals}`;
  }

  function chart(q, minutes) {
    const windowText = minutes === 60 ? "last hour" : `last ${minutes} min`;
    const quiet = LINES.every(([e]) => !q.events[e]);
    const top = niceMax(Math.max(0, ...LINES.flatMap(([e]) => q.rates[e].filter(Number.isFinite))));
    const label = describe(q, windowText);
    const drawing = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, class: "rate-chart" },
      svg("title", {}, label),
      svg("line", { class: "axis", x1: 0, x2: W, y1: TOP, y2: TOP }),
      svg("line", { class: "axis", x1: 0, x2: W, y1: BOTTOM, y2: BOTTOM }),
      svg("text", { class: "tick", x: 2, y: TOP - 3, "data-field": "y-max" }, fmtRate(top)),
      svg("text", { class: "tick", x: 2, y: H - 2 }, `\u2212${minutes} min`),
      svg("text", { class: "tick", x: W - 2, y: H - 2, "text-anchor": "end" }, "now"));
    for (const [e] of LINES) {
      const values = q.rates[e];
      const n = values.length;
      const points = values.map((v, i) => {
        const x = n > 1 ? (i / (n - 1)) * W : i * W;
        const y = BOTTOM - ((Number.isFinite(v) ? v : 0) / top) * (BOTTOM - TOP);
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      if (n === 1) points.push(`${W},${points[0].split(",")[1]}`);
      drawing.append(svg("polyline", { class: "line " + e, points: points.join(" "), "data-event": e }));
    }
    if (quiet) {
      drawing.append(svg("text", { class: "quiet", x: W / 2, y: (TOP + BOTTOM) / 2, "text-anchor": "middle" },
        `no events in the ${windowText}`));
    }
    const legend = el("div", { class: "legend" }, LINES.map(([e, label]) =>
      el("span", { "data-field": e }, el("i", { class: "swatch " + e }), `${label} ${fmtRate(q.rates[e][q.rates[e].length - 1])}`)));
    return el("figure", { class: "chart", "data-queue": q.name },
      el("figcaption", {}, el("b", {}, q.name)), drawing, legend);
  }

  PL.renderRates = function (data) {
    const box = $("rate-charts");
    box.dataset.takenAtMs = String(data.taken_at_ms);
    $("rates-note").textContent = data.truncated
      ? `jobs per second, per minute · the ${data.queues.length} busiest of ${data.queues_total} queues`
      : "jobs per second, per minute";
    if (!data.queues.length) return box.replaceChildren(el("p", { class: "muted" }, "No queues yet."));
    // One odd queue must not hide the others' charts.
    box.replaceChildren(...data.queues.map((q) => {
      try {
        return chart(q, data.minutes);
      } catch (err) {
        return el("p", { class: "error", "data-queue": q.name }, `${q.name}: cannot draw its chart: ${err.message}`);
      }
    }));
  };

  PL.ratesFailed = function (message) {
    $("rate-charts").replaceChildren(el("p", { class: "error" }, "Cannot read the rates: " + message));
  };
})();
