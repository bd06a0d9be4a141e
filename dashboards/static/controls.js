// PinLater dashboard: operator sign-in, controls (each confirmed first),
// the jobs list and job lookup. Uses the helpers of app.js (window.PL).
"use strict";

(function () {
  const PL = window.PL;
  const el = PL.el;
  const $ = (id) => document.getElementById(id);

  // -- operator and token ------------------------------------------------------------
  function showAuth() {
    const who = PL.auth.operator;
    $("auth-summary").textContent = PL.auth.token ? `Operator: ${who || "(no name)"}` : "Operator: not signed in";
    $("operator").value = who;
  }

  // -- confirmation ----------------------------------------------------------------
  function confirmAction(title, text) {
    const dialog = $("confirm");
    $("confirm-title").textContent = title;
    $("confirm-text").textContent = text;
    dialog.returnValue = "";
    dialog.showModal();
    return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }));
  }

  function needSignIn() {
    if (!PL.config || !PL.config.controls_enabled) {
      PL.toast("Controls are disabled on this dashboard (no operator token configured).", true);
      return true;
    }
    if (!PL.auth.token || !PL.auth.operator) {
      PL.toast("Enter your name and the operator token first (top right).", true);
      $("auth").open = true;
      return true;
    }
    return false;
  }

  const post = (action, body) => PL.api(`/api/queues/${encodeURIComponent(PL.selected)}/${action}`, { body });

  // A call over the queue's shards left these out (out of rotation): say so.
  function skipped(answer) {
    return answer.partial ? ` Shard ${answer.shards_skipped.join(", ")} is out of rotation: its jobs are left out.` : "";
  }

  // Runs a control after the operator confirmed it; reports the outcome and refreshes the page.
  async function control(action, body, title, describe) {
    if (needSignIn()) return;
    const queue = PL.selected;
    try {
      let text = describe;
      if (typeof describe === "function") text = describe(await post(action, { ...body, dry_run: true }));
      if (text === null) return;
      if (!(await confirmAction(title, text))) return;
      const result = await post(action, body);
      const shown = Object.entries(result).filter(([k]) => !["audited", "partial", "shards_skipped"].includes(k))
        .map(([k, v]) => `${k}: ${v}`).join(", ");
      PL.toast(`${action} on ${queue}: ${shown}` + (result.audited === false ? " (audit log unreachable!)" : "") + skipped(result),
        result.audited === false || Boolean(result.partial));
    } catch (err) {
      PL.toast(`${action} on ${queue} refused: ${err.message}`, true);
    }
    PL.refresh();
  }

  const num = (id) => ($(id).value.trim() === "" ? null : Number($(id).value));

  function wireControls() {
    $("rate-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const rate = num("rate-input");
      // The server refuses these too (and anything not finite); asking first saves a confirmation.
      if (rate !== null && (!Number.isFinite(rate) || !(rate >= 0) || rate > PL.MAX_RATE))
        return PL.toast(`Rate must be a number from 0 to ${PL.MAX_RATE.toLocaleString("en-US")} jobs/s, or empty for unlimited.`, true);
      control("rate", { rate }, "Change rate limit",
        `Set the dequeue rate of ${PL.selected} to ${rate === null ? "unlimited" : rate + " jobs/s"} for every worker?`);
    });
    $("cap-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const cap = num("cap-input");
      if (cap !== null && (!Number.isInteger(cap) || cap < 1 || cap > PL.MAX_RUNNING))
        return PL.toast(`Concurrency must be a whole number of jobs from 1 to ${PL.MAX_RUNNING.toLocaleString("en-US")}, or empty for no cap.`, true);
      control("concurrency", { max_running: cap }, "Change concurrency cap",
        `Let ${cap === null ? "any number of" : "at most " + cap} jobs of ${PL.selected} run at once, over every worker?`);
    });
    $("key-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const cap = num("key-cap-input");
      const rate = num("key-rate-input");
      if (cap !== null && (!Number.isInteger(cap) || cap < 1 || cap > PL.MAX_RUNNING))
        return PL.toast(`A key's cap must be a whole number of jobs from 1 to ${PL.MAX_RUNNING.toLocaleString("en-US")}, or empty for no cap.`, true);
      if (rate !== null && (!Number.isFinite(rate) || !(rate > 0) || rate > PL.MAX_RATE))
        return PL.toast(`A key's rate must be above 0 and at most ${PL.MAX_RATE.toLocaleString("en-US")} jobs/s, or empty for unlimited.`, true);
      control("key-limits", { key_max_running: cap, key_rate: rate }, "Change per-key limits",
        `Let each fairness key of ${PL.selected} run ${cap === null ? "any number of" : "at most " + cap} jobs at once` +
        ` and start ${rate === null ? "any number of jobs" : "at most " + rate + " jobs/s"}, over every worker?`);
    });
    $("cancel-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const descriptors = $("cancel-descriptors").value.split(/\s+/).filter((d) => d !== "");
      if (!descriptors.length) return PL.toast("Give the descriptors of the jobs to cancel, one per line.", true);
      control("cancel", { descriptors }, "Cancel jobs",
        `End ${PL.fmtInt(descriptors.length)} job(s) of ${PL.selected} now? Pending ones never run; running ones end ` +
        "FAILED at once and their workers are told at their next heartbeat. Neither is retried.");
    });
    $("btn-pause").addEventListener("click", () =>
      control("pause", {}, "Pause queue", `Pause ${PL.selected}? Workers stop dequeuing its jobs within a second; running jobs finish.`));
    $("btn-resume").addEventListener("click", () =>
      control("resume", {}, "Resume queue", `Resume ${PL.selected} at its configured rate?`));
    $("retry-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const body = { limit: num("retry-limit"), priority: num("retry-priority"), attempts: num("retry-attempts") };
      const delay = num("retry-delay");
      if (delay) body.delay_s = delay * 60;
      control("retry-failed", body, "Retry failed jobs", (preview) => {
        if (!preview.would_affect) { PL.toast(`No failed jobs to retry in ${PL.selected}.` + skipped(preview)); return null; }
        return `Move ${PL.fmtInt(preview.would_affect)} failed job(s) of ${PL.selected}` +
          `${body.priority ? " (priority " + body.priority + ")" : ""} back to pending with ${body.attempts} attempt(s)` +
          `${delay ? ", runnable in " + delay + " min" : ", runnable now"}?` + skipped(preview);
      });
    });
    $("delete-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const body = { state: $("delete-state").value, priority: num("delete-priority"), limit: num("delete-limit"),
        body_regex: $("delete-regex").value || null };
      control("delete-jobs", body, "Delete jobs", (preview) => {
        if (!preview.would_affect) { PL.toast(`No ${body.state} jobs match in ${PL.selected}.` + skipped(preview)); return null; }
        return `Permanently delete ${PL.fmtInt(preview.would_affect)} ${body.state} job(s) of ${PL.selected}` +
          `${body.body_regex ? " whose body matches /" + body.body_regex + "/" : ""}? This cannot be undone.` + skipped(preview);
      });
    });
  }

  // -- jobs and lookup -------------------------------------------------------------------
  let jobsQuery = null;

  function jobRow(j) {
    return el("tr", { "data-descriptor": j.descriptor },
      el("td", { class: "mono" }, j.descriptor), el("td", {}, j.state),
      el("td", { class: "num" }, `${j.attempts_remaining}/${j.attempts_allowed}`),
      el("td", { class: "status", title: j.custom_status }, j.custom_status || "—"),
      el("td", {}, PL.fmtTime(j.created_at_ms)), el("td", {}, PL.fmtTime(j.run_after_ms)), el("td", {}, PL.fmtTime(j.updated_at_ms)),
      el("td", {}, j.claimed_by || "—"),
      el("td", {}, el("button", { class: "link", onclick: () => showJob(j.descriptor, true) }, "body")));
  }

  async function loadJobs(more) {
    const tbody = document.querySelector("#jobs tbody");
    try {
      if (!more) {
        const state = $("jobs-state").value;
        jobsQuery = { queue: $("jobs-queue").value, state: state.replace("-future", ""), future: state.endsWith("-future") ? "1" : "",
          priority: $("jobs-priority").value, limit: "25", continuation: "0" };
        if (!jobsQuery.queue) return PL.toast("No queue to show.", true);
      }
      const page = await PL.api("/api/jobs?" + new URLSearchParams(jobsQuery));
      const head = el("tr", {}, ["Descriptor", "State", "Attempts left", "Custom status", "Created", "Run after", "Updated", "Claimed by", ""].map((h) => el("th", {}, h)));
      if (!more) tbody.replaceChildren(head);
      tbody.append(...page.jobs.map(jobRow));
      if (!more && !page.jobs.length) tbody.append(el("tr", {}, el("td", { colspan: 9, class: "muted" }, "No jobs in that state.")));
      $("jobs-partial").hidden = !page.partial;
      $("jobs-partial").textContent = page.partial ? skipped(page).trim() : "";
      jobsQuery.continuation = page.continuation;
      $("jobs-more").hidden = page.continuation === "-1";
    } catch (err) {
      PL.toast("Cannot list jobs: " + err.message, true);
    }
  }

  async function showJob(descriptor, withBody) {
    const box = $("job-detail");
    try {
      const j = await PL.api(`/api/job?descriptor=${encodeURIComponent(descriptor)}${withBody ? "&body=1" : ""}`);
      const rows = [["Descriptor", j.descriptor], ["State", j.state], ["Attempts left", `${j.attempts_remaining} of ${j.attempts_allowed}`],
        ["Custom status", j.custom_status || "—"], ["Created", PL.fmtTime(j.created_at_ms)], ["Run after", PL.fmtTime(j.run_after_ms)],
        ["Updated", PL.fmtTime(j.updated_at_ms)], ["Claimed by", j.claimed_by || "—"]];
      const parts = [el("table", {}, el("tbody", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)))))];
      if (withBody) {
        parts.push(el("p", { class: "muted" }, `Body: ${PL.fmtInt(j.body_bytes)} bytes` + (j.body_truncated ? `, first ${PL.fmtInt(PL.config.body_cap_bytes)} shown` : "")));
        parts.push(el("pre", { id: "job-body" }, j.body));
      } else {
        parts.push(el("button", { onclick: () => showJob(descriptor, true) }, "Show body"));
      }
      box.replaceChildren(...parts);
      box.hidden = false;
    } catch (err) {
      box.replaceChildren(el("p", { class: "error" }, err.message));
      box.hidden = false;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    showAuth();
    $("auth-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      localStorage.setItem("pl-operator", $("operator").value.trim());
      if ($("token").value) sessionStorage.setItem("pl-token", $("token").value);
      $("token").value = "";
      $("auth").open = false;
      showAuth();
      PL.loadConfig();
      PL.refresh();
    });
    $("forget-auth").addEventListener("click", () => { sessionStorage.removeItem("pl-token"); showAuth(); PL.loadConfig(); });
    wireControls();
    $("jobs-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadJobs(false); });
    $("jobs-more").addEventListener("click", () => loadJobs(true));
    $("jobs-queue").addEventListener("change", () => {
      const q = PL.snap && PL.snap.queues.find((x) => x.name === $("jobs-queue").value);
      if (q) PL.fillPriorities($("jobs-priority"), q.priorities, "all");
    });
    $("lookup-form").addEventListener("submit", (ev) => { ev.preventDefault(); showJob($("lookup-descriptor").value.trim(), false); });
  });
})();
