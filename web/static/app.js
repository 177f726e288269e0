// raftsched web: small vanilla JS for live pages. Every page works without it; with it,
// the DAG list, grid, graph, run page, cluster page, workers page and task logs update in
// place.
"use strict";

(function () {
  const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

  function banner(message) {
    const el = document.getElementById("cluster-banner");
    if (!el) return;
    if (message) { el.textContent = message; el.hidden = false; } else { el.hidden = true; }
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    const body = await response.json().catch(() => ({}));
    if (response.status === 503) { banner(body.error || "the scheduler cluster is unreachable"); throw new Error("503"); }
    if (!response.ok) throw new Error(body.error || response.statusText);
    banner("");
    return body;
  }

  async function postJSON(url, data) {
    const response = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), Accept: "application/json" },
      body: JSON.stringify(data),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }

  // Poll fn every ms while the tab is visible; never two at once.
  function every(ms, fn) {
    let busy = false;
    setInterval(async () => {
      if (busy || document.hidden) return;
      busy = true;
      try { await fn(); } catch (e) { /* shown by banner or ignored until next tick */ } finally { busy = false; }
    }, ms);
  }

  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const fill = (template, run, task) => template
    .replace("__RUN__", encodeURIComponent(run)).replace("__TASK__", encodeURIComponent(task || ""));
  const fmt = (iso) => iso ? iso.replace("T", " ").replace(/(\.\d+)?(\+00:00|Z)$/, "") : "—";
  const stateClass = (s) => "state-" + (s || "none");

  // -- DAG list: pause toggles, live run marks and next runs ---------------------------
  function dagList(table) {
    table.querySelectorAll("button.toggle[data-url]").forEach((button) => {
      button.addEventListener("click", async (event) => {
        event.preventDefault();
        const pause = button.classList.contains("on");
        try {
          const result = await postJSON(button.dataset.url, { paused: pause });
          button.classList.toggle("on", !result.paused);
          button.classList.toggle("off", result.paused);
          button.setAttribute("aria-checked", String(!result.paused));
          button.form.querySelector('input[name="paused"]').value = result.paused ? "0" : "1";
        } catch (e) { alert("Could not change the DAG: " + e.message); }
      });
    });
    every(10000, async () => {
      const page = await getJSON(table.dataset.refresh);
      for (const dag of page.dags) {
        const row = table.querySelector(`tr[data-dag="${CSS.escape(dag.dag_id)}"]`);
        if (!row) continue;
        row.querySelector(".next-run").textContent = dag.next_run ? fmt(dag.next_run.logical_date) : "—";
        const marks = row.querySelector(".marks");
        marks.replaceChildren(...dag.recent_runs.slice().reverse().map((run) => {
          const a = el("a", { class: "mark " + stateClass(run.state), title: `${run.run_id}: ${run.state}` });
          a.href = fill(table.dataset.runUrl, run.run_id).replace("__DAG__", encodeURIComponent(dag.dag_id));
          return a;
        }));
      }
    });
  }

  // -- DAG page: grid and graph ----------------------------------------------------------
  function grid(table) {
    every(5000, async () => {
      const data = await getJSON(table.dataset.refresh);
      const headRow = el("tr");
      headRow.append(table.tHead.querySelector("th.corner"));  // keep the row header as rendered
      for (const run of data.runs) {
        const th = el("th", { class: "run-col", scope: "col" });
        const when = run.logical_date ? ` · ${fmt(run.logical_date)} UTC` : "";
        const a = el("a", { class: "run-head", title: `${run.run_id} · ${run.state || "none"}${when}` });
        a.href = fill(table.dataset.runUrl, run.run_id);
        a.append(el("span", { class: "run-label" }, run.label || run.run_id),
          el("span", { class: "run-bar " + stateClass(run.state) }));
        th.append(a);
        headRow.append(th);
      }
      table.tHead.replaceChildren(headRow);
      const empty = document.getElementById("grid-empty");
      if (empty) empty.hidden = data.runs.length > 0;
      const rows = data.tasks.map((taskId) => {
        const tr = el("tr");
        tr.append(el("th", { class: "task-col", scope: "row" }, taskId));
        data.cells[taskId].forEach((cell, i) => {
          const td = el("td");
          if (cell) {
            const run = data.runs[i];
            const a = el("a", { class: "cell " + stateClass(cell.state),
              title: `${taskId} · ${run.run_id} · ${cell.state.replace(/_/g, " ")} · try ${cell.try_number}` });
            a.href = fill(table.dataset.cellUrl, run.run_id, taskId);
            td.append(a);
          } else td.append(el("span", { class: "cell empty" }));
          tr.append(td);
        });
        return tr;
      });
      table.tBodies[0].replaceChildren(...rows);
      document.querySelectorAll("#graph g.node").forEach((node) => {
        const state = data.latest[node.dataset.task] || "none";
        node.setAttribute("class", "node " + stateClass(state));
        node.querySelector("title").textContent = `${node.dataset.task}: ${state}`;
      });
      const next = document.getElementById("next-run");
      if (next) next.textContent = data.next_run ? fmt(data.next_run.logical_date) : "—";
    });
  }

  // -- run page: task instance states ------------------------------------------------------
  function runPage(form) {
    every(5000, async () => {
      const data = await getJSON(form.dataset.refresh);
      const badge = (s) => el("span", { class: "badge " + stateClass(s) }, (s || "none").replace(/_/g, " "));
      document.getElementById("run-state").replaceChildren(badge(data.run.state));
      for (const ti of data.task_instances) {
        const row = form.querySelector(`tr[data-task="${CSS.escape(ti.task_id)}"]`);
        if (!row) continue;
        row.querySelector(".ti-state").replaceChildren(badge(ti.state));
        row.querySelector(".ti-try").textContent = `${ti.try_number}/${ti.max_tries}`;
      }
    });
  }

  // -- task page: a log that follows the running attempt --------------------------------
  function liveLog(pre) {
    let afterSeq = 0, started = false;
    const status = document.getElementById("log-status");
    async function poll() {
      const url = new URL(pre.dataset.url, location.href);
      url.searchParams.set("after_seq", afterSeq);
      const data = await getJSON(url);
      if (!started && (data.chunks.length || data.done)) { pre.textContent = ""; started = true; }
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
      for (const chunk of data.chunks) {
        const span = el("span", chunk.stream === "stderr" ? { class: "stderr" } : {}, chunk.text);
        pre.append(span);
      }
      afterSeq = data.last_seq;
      if (atBottom) pre.scrollTop = pre.scrollHeight;
      if (data.done && !pre.textContent) pre.textContent = "(no output)";
      status.textContent = data.done ? `attempt ${data.try_number}: ${data.state}` : `following attempt ${data.try_number || "…"} (${data.state})`;
      return data;
    }
    (async function loop() {
      let data = null;
      try { data = await poll(); } catch (e) { status.textContent = "retrying: " + e.message; }
      if (data && data.more) return loop();
      if (!data || !data.done) setTimeout(loop, 2000);
    })();
  }

  // -- cluster page ---------------------------------------------------------------------
  function clusterPage(table) {
    every(3000, async () => {
      const data = await getJSON(table.dataset.refresh);
      document.getElementById("cluster-leader").textContent = "leader: " + (data.leader || "none");
      document.getElementById("cluster-updated").textContent = "updated " + new Date().toLocaleTimeString();
      const db = document.getElementById("cluster-db");
      if (db) {
        db.textContent = (data.db_watermark == null ? "DB watermark unknown" : `DB watermark ${data.db_watermark}`)
          + `, outbox backlog ${data.outbox_backlog ?? "?"}`;
        if (data.db_ok === false) db.append(" ", el("span", { class: "badge state-failed" }, "DB down"));
        if (data.backpressure) db.append(" ", el("span", { class: "badge state-up_for_retry" }, "back-pressure"));
      }
      const perNode = Boolean(data.watermark_per_node);
      if (perNode !== Boolean(table.dataset.watermarkCol)) {  // the column comes and goes
        table.dataset.watermarkCol = perNode ? "1" : "";
        const outbox = [...table.tHead.rows[0].cells].find((th) => th.textContent === "Outbox backlog");
        const column = table.tHead.querySelector("th.db-col");
        if (perNode && !column && outbox) outbox.before(el("th", { class: "db-col", title: "Reported by the leader only" }, "DB watermark"));
        if (!perNode && column) column.remove();
      }
      table.tBodies[0].replaceChildren(...data.nodes.map((n) => {
        const tr = el("tr", { class: "role-row-" + n.role });
        const cells = [
          el("code", {}, n.node_id || n.address), el("code", {}, n.api_address || "—"),
          el("span", { class: "badge node-" + n.role }, n.role || "?"),
          n.has_quorum ? "yes" : "no", n.term, n.commit_index, n.applied_index, n.lag,
          ...(perNode ? [(n.db_watermark ?? "") + (n.db_ok === false ? " (DB down)" : "")] : []),
          n.outbox_backlog + (n.backpressure ? " (back-pressure)" : ""),
          fmt(n.last_leader_contact), n.error || "",
        ];
        for (const c of cells) {
          const td = el("td");
          if (c instanceof Node) td.append(c); else td.textContent = String(c);
          tr.append(td);
        }
        return tr;
      }));
    });
  }

  // -- workers page: live and lost workers -------------------------------------------------
  function workersPage(table) {
    const lostTable = document.getElementById("workers-lost");
    const dash = (v) => (v === null || v === undefined || v === "" ? "—" : String(v));
    const row = (cls, w, cells) => {
      const tr = el("tr", { class: cls, "data-worker": w.worker_id });
      for (const c of cells) {
        const td = el("td", c.cls ? { class: c.cls } : {});
        if (c.node) td.append(...c.node); else td.textContent = c.text;
        tr.append(td);
      }
      return tr;
    };
    const running = (w) => {
      if (!w.running.length) return [el("span", { class: "muted" }, "idle")];
      const out = [];
      w.running.forEach((r, i) => {
        const a = el("a", {}, `${r.dag_id}/${r.task_id}`);
        a.href = table.dataset.taskUrl.replace("__DAG__", encodeURIComponent(r.dag_id))
          .replace("__RUN__", encodeURIComponent(r.run_id)).replace("__TASK__", encodeURIComponent(r.task_id));
        out.push(a, " ", el("span", { class: "muted small" }, `try ${r.try_number}, ${r.run_id}`));
        if (i < w.running.length - 1) out.push(el("br"));
      });
      return out;
    };
    every(3000, async () => {
      const data = await getJSON(table.dataset.refresh);
      const live = data.workers.map((w) => row("worker-row", w, [
        { node: [el("code", {}, w.worker_id)] }, { text: dash(w.host) }, { text: dash(w.pid) },
        { text: dash(w.version) }, { text: w.queues.length ? w.queues.join(", ") : "default" },
        { cls: "slots", text: `${w.slots_used}/${w.slots_total || "?"}` },
        { cls: "running", node: running(w) }, { text: fmt(w.last_seen) },
      ]));
      if (!live.length) {
        const tr = el("tr"), td = el("td", { colspan: "8", class: "muted" }, "No worker has called any node in the last 30 s.");
        tr.append(td); live.push(tr);
      }
      table.tBodies[0].replaceChildren(...live);
      lostTable.tBodies[0].replaceChildren(...data.lost.map((w) => row("worker-lost-row", w, [
        { node: [el("code", {}, w.worker_id)] }, { text: dash(w.host) }, { text: dash(w.pid) },
        { text: dash(w.version) }, { text: fmt(w.last_seen) }, { text: fmt(w.lost_at) },
        { cls: "reason", text: dash(w.lost_reason) },
      ])));
      document.getElementById("workers-lost-section").hidden = data.lost.length === 0;
      document.getElementById("workers-count").textContent = `${data.workers.length} live`
        + (data.lost.length ? `, ${data.lost.length} lost in the last 10 minutes` : "");
      document.getElementById("workers-answered").textContent = "answered by " + (data.answered_by || "?");
      document.getElementById("workers-updated").textContent = "updated " + new Date().toLocaleTimeString();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-confirm]").forEach((form) =>
      form.addEventListener("submit", (e) => { if (!confirm(form.dataset.confirm)) e.preventDefault(); }));
    const pick = (id, fn) => { const node = document.getElementById(id); if (node) fn(node); };
    pick("dag-list", dagList);
    pick("grid", grid);
    pick("run-form", runPage);
    pick("log", liveLog);
    pick("cluster", clusterPage);
    pick("workers", workersPage);
  });
})();
