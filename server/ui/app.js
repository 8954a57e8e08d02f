// braid dashboard: reads the control API with the token the user gave
// and shows jobs, workers, the paths of live sessions and a job's units
// on a timeline per worker thread. Read-only: it only sends GETs.
//
// The token comes from the login form or from the URL fragment
// (#token=...), which browsers never send to the server; it is kept in
// sessionStorage (this tab only) and the fragment is removed at once.
"use strict";

const tokenKey = "braid-token";
const pollMs = 500; // a killed worker shows dead within 2 s: the server notices in about 0.1 s, the page within a poll
let selectedJob = 0;
let lastPaths = new Map(); // worker/path -> {t, sent, received}

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function takeToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(tokenKey, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(tokenKey) || "";
}

class AuthError extends Error {}

async function get(path) {
  const r = await fetch(path, { headers: { "Authorization": "Bearer " + sessionStorage.getItem(tokenKey) }, cache: "no-store" });
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
    if (r.status === 401 || r.status === 403) throw new AuthError(msg);
    throw new Error(path + ": " + msg);
  }
  return r.json();
}

function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function bits(bps) {
  const u = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s"];
  let i = 0;
  while (bps >= 1000 && i < u.length - 1) { bps /= 1000; i++; }
  return bps.toFixed(1) + " " + u[i];
}

function secs(s) {
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  return (s / 60).toFixed(1) + " min";
}

// short cuts s to n characters, with an ellipsis; the whole is in the
// cell's title.
function short(s, n) { return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }

function when(t) { return t ? new Date(t).toLocaleTimeString() : ""; }

// empty says in a table's body that it has no rows, with why.
function empty(body, text) {
  const cols = body.parentElement.tHead.rows[0].cells.length;
  body.append(el("tr", { class: "empty" }, el("td", { colspan: cols }, text)));
}

function renderJobs(jobs) {
  const body = $("jobs").tBodies[0];
  body.replaceChildren();
  if (!jobs.length) empty(body, "no jobs yet: submit one (braid submit, braid local) and it shows here");
  for (const j of jobs) {
    const u = j.units || {};
    const pct = u.total ? Math.round(100 * u.done / u.total) : 0;
    const fill = el("span"); fill.style.width = pct + "%";
    const t = j.timings || {};
    const took = t.started ? secs(((t.finished ? new Date(t.finished) : new Date()) - new Date(t.started)) / 1000) : "";
    const row = el("tr", { "data-job": j.job, "data-state": j.state },
      el("td", { class: "num" }, j.job),
      el("td", {}, j.op),
      el("td", { class: "state state-" + j.state }, j.state),
      el("td", { class: "progress" }, el("span", { class: "bar" }, fill), `${u.done}/${u.total} (${pct}%)`),
      el("td", { class: "num running" }, u.computing || 0),
      el("td", { class: "num inflight" }, u.running || 0),
      el("td", { class: "num" }, u.retries || 0),
      el("td", {}, when(t.submitted)),
      el("td", {}, took),
      el("td", { class: "error", title: j.error || "" }, short(j.error || "", 160)));
    if (j.job === selectedJob) row.classList.add("selected");
    row.addEventListener("click", () => { selectedJob = j.job; refresh(); });
    body.append(row);
  }
}

// deathOf says when and why the server declared worker w dead.
function deathOf(w) {
  if (!w.died) return "not live since the server started";
  return "dead since " + when(w.died) + (w.died_of ? ": " + w.died_of : "");
}

// diedCell shows a dead worker's death in its row: when (the server's
// clock, in this browser's time zone) and why, the cause cut short with
// the whole in the title. Empty for a live worker.
function diedCell(w) {
  if (w.alive) return el("td", { class: "died" });
  const text = deathOf(w);
  return el("td", { class: "died", title: text }, short(text, 120));
}

function renderWorkers(workers) {
  const body = $("workers").tBodies[0];
  body.replaceChildren();
  const pbody = $("paths").tBodies[0];
  pbody.replaceChildren();
  const now = performance.now();
  const seen = new Map();
  if (!workers.length) empty(body, "no workers registered: start one (braid worker) and it shows here");
  for (const w of workers) {
    const threads = w.threads || 0;
    // Busy: the share of the lent threads computing now (last heartbeat).
    const busy = w.alive && threads ? Math.round(100 * Math.min(w.running || 0, threads) / threads) + "%" : "";
    // Compute share: compute time over the thread time lent while the
    // worker had units (the rest went to waiting for and moving units).
    const share = w.lent_ns ? Math.round(100 * (w.compute_ns || 0) / w.lent_ns) + "%" : "";
    // A dead worker's row stays, greyed, as long as the server lists it,
    // with when and why it died.
    body.append(el("tr", { "data-worker": w.id, class: w.alive ? "live" : "dead" },
      el("td", {}, w.id),
      el("td", {}, w.name || ""),
      el("td", { class: w.alive ? "state-done" : "state-failed", title: w.alive ? "" : deathOf(w) }, w.alive ? "live" : "dead"),
      diedCell(w),
      el("td", { class: "num threads" }, threads),
      el("td", { class: "num running" }, w.running),
      el("td", { class: "num queued" }, w.queued),
      el("td", { class: "num load" }, w.alive ? (w.load || 0).toFixed(2) : ""),
      el("td", { class: "num done" }, w.done || 0),
      el("td", { class: "num tries", title: "tries computed: the units done and copies whose result came second or failed" }, w.tries || 0),
      el("td", { class: "num compute" }, secs((w.compute_ns || 0) / 1e9)),
      el("td", { class: "num busy" }, busy),
      el("td", { class: "num share", title: "compute time / thread time lent while it had units" }, share)));
    (w.paths || []).forEach((p, i) => {
      const key = w.id + "/" + i + "/" + p.local + "/" + p.remote;
      const prev = lastPaths.get(key);
      let out = "", inn = "";
      if (prev && now > prev.t) {
        const dt = (now - prev.t) / 1000;
        out = bits(8 * Math.max(0, p.bytes_sent - prev.sent) / dt);
        inn = bits(8 * Math.max(0, p.bytes_received - prev.received) / dt);
      }
      seen.set(key, { t: now, sent: p.bytes_sent, received: p.bytes_received });
      pbody.append(el("tr", { "data-worker": w.id, "data-path": i },
        el("td", {}, w.id),
        el("td", {}, p.local + " \u2192 " + p.remote),
        el("td", { class: p.state === "up" ? "state-done" : "state-failed" }, p.state),
        el("td", { class: "num" }, bytes(p.bytes_sent)),
        el("td", { class: "num" }, bytes(p.bytes_received)),
        el("td", { class: "num" }, out),
        el("td", { class: "num" }, inn),
        el("td", { class: "num" }, p.rtt_ns ? secs(p.rtt_ns / 1e9) : "")));
    });
  }
  if (!pbody.rows.length) empty(pbody, "no live sessions: no worker is connected");
  lastPaths = seen;
}

// ms returns an RFC 3339 time of the server's in milliseconds after
// ref (whole seconds, from Date.parse), keeping its nanoseconds: Date
// alone keeps milliseconds, too coarse for short units.
function ms(t, ref) {
  const m = /^(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$/.exec(t);
  if (!m) return new Date(t).getTime() - ref;
  return Date.parse(m[1] + m[3]) - ref + (m[2] ? parseFloat("0" + m[2]) * 1000 : 0);
}

// lanes places each try of a worker on the thread that ran it, when it
// ran, as the worker measured and the server placed on its clock
// (started, ended, thread). For a worker that does not report that (an
// older one) it replays the worker's queue instead: a worker runs the
// units of a session in the order they arrive, each on the first thread
// that is free; a try starts when it was sent or when a thread came
// free, whichever is later, and lasts its compute time. threads maps a
// worker to the threads it lends.
function lanes(units, threads) {
  const ref = units.length ? Date.parse(units[0].sent.replace(/\.\d+/, "")) : 0;
  const byWorker = new Map();
  for (const u of units) {
    if (!byWorker.has(u.worker)) byWorker.set(u.worker, []);
    byWorker.get(u.worker).push({ u, sent: ms(u.sent, ref), received: ms(u.received, ref) });
  }
  const rows = [];
  for (const [worker, list] of [...byWorker.entries()].sort()) {
    const measured = list.every(s => s.u.started && s.u.ended && s.u.thread >= 0);
    if (measured) {
      const n = Math.max(threads.get(worker) || 0, 1 + Math.max(...list.map(s => s.u.thread)));
      for (const s of list) {
        s.start = ms(s.u.started, ref);
        s.end = ms(s.u.ended, ref);
        s.lane = s.u.thread;
      }
      rows.push({ worker, lanes: n, spans: list, placed: "measured" });
      continue;
    }
    list.sort((a, b) => a.sent - b.sent || a.u.unit - b.u.unit);
    const n = threads.get(worker) || new Set(list.map(s => s.u.stream)).size || 1;
    const free = new Array(n).fill(-Infinity); // when each thread is free again
    for (const s of list) {
      let i = 0;
      for (let k = 1; k < n; k++) if (free[k] < free[i]) i = k;
      s.start = Math.max(s.sent, free[i]);
      s.end = s.start + s.u.compute_ns / 1e6;
      s.lane = i;
      free[i] = s.end;
    }
    rows.push({ worker, lanes: n, spans: list, placed: "replayed" });
  }
  return rows;
}

function renderTimeline(tl, threads) {
  const box = $("timeline");
  box.replaceChildren();
  $("timeline-job").textContent = tl ? "of job " + tl.job : "";
  box.setAttribute("data-job", tl ? tl.job : "");
  if (!tl) return;
  if (!tl.kept) {
    box.setAttribute("height", 24);
    box.append(svg("text", { x: 4, y: 16 }, "The server no longer keeps this job's tries."));
    return;
  }
  const rows = lanes(tl.units, threads);
  let t0 = Infinity, t1 = -Infinity;
  for (const r of rows) for (const s of r.spans) { t0 = Math.min(t0, s.start); t1 = Math.max(t1, s.end); }
  const left = 170, width = 900, laneH = 16, top = 18;
  const scale = t1 > t0 ? (width - left - 10) / (t1 - t0) : 1;
  let y = top;
  box.append(svg("text", { x: left, y: 12 }, "0"), svg("text", { x: width - 60, y: 12 }, isFinite(t1 - t0) ? secs((t1 - t0) / 1000) : ""));
  for (const r of rows) {
    for (let l = 0; l < r.lanes; l++) {
      box.append(svg("text", { x: 4, y: y + 12, class: "lane", "data-worker": r.worker, "data-thread": l, "data-placed": r.placed },
        r.worker + " thread " + l + (r.placed === "replayed" ? "*" : "")));
      box.append(svg("line", { x1: left, x2: width, y1: y + laneH, y2: y + laneH }));
      y += laneH;
    }
    const base = y - r.lanes * laneH;
    for (const s of r.spans) {
      const rect = svg("rect", {
        class: "unit" + (s.u.error ? " failed" : ""), "data-unit": s.u.unit, "data-attempt": s.u.attempt, "data-worker": r.worker,
        "data-thread": s.lane, "data-start": (s.start - t0).toFixed(6), "data-end": (s.end - t0).toFixed(6),
        x: left + (s.start - t0) * scale, y: base + s.lane * laneH + 2,
        width: Math.max(1, (s.end - s.start) * scale), height: laneH - 4,
      });
      rect.append(svg("title", {}, `unit ${s.u.unit} try ${s.u.attempt} on ${r.worker} thread ${s.lane} (stream ${s.u.stream}): ` +
        `computed ${secs(s.u.compute_ns / 1e9)}, back ${secs((s.received - s.sent) / 1000)} after it was sent` +
        `${s.u.error ? "; failed: " + s.u.error : ""}`));
      box.append(rect);
    }
  }
  if (!rows.length) box.append(svg("text", { x: 4, y: y + 12 }, "No unit has come back yet."));
  box.setAttribute("height", y + 8);
}

function showLogin(msg) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("logout").hidden = true;
  setStatus(msg || "", !!msg);
}

function setStatus(msg, error) {
  $("status").textContent = msg;
  $("status").className = error ? "error" : "";
}

async function refresh() {
  try {
    const [jobs, workers] = await Promise.all([get("/v1/jobs?limit=50"), get("/v1/workers")]);
    const list = jobs.jobs || [];
    if (!selectedJob && list.length) selectedJob = list[0].job;
    const tl = selectedJob ? await get("/v1/jobs/" + selectedJob + "/units") : null;
    $("login").hidden = true;
    $("main").hidden = false;
    $("logout").hidden = false;
    renderJobs(list);
    renderWorkers(workers.workers || []);
    renderTimeline(tl, new Map((workers.workers || []).map(w => [w.id, w.threads])));
    setStatus("updated " + new Date().toLocaleTimeString(), false);
    document.body.setAttribute("data-loaded", "1");
  } catch (e) {
    if (e instanceof AuthError) { showLogin(e.message); return false; }
    setStatus(e.message, true);
  }
  return true;
}

let timer = 0;
function start() {
  clearInterval(timer);
  refresh().then(ok => { if (ok) timer = setInterval(refresh, pollMs); });
}

document.addEventListener("DOMContentLoaded", () => {
  $("server").textContent = location.host;
  $("login-form").addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(tokenKey, $("token").value.trim());
    $("token").value = "";
    start();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(tokenKey);
    clearInterval(timer);
    showLogin("");
  });
  if (takeToken()) start(); else showLogin("");
});
