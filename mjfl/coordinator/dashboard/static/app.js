// The mjfl dashboard's page: draws what /api/runs and /api/runs/{id} send (state.py's shapes),
// and, during a `mjfl testbed run`, the live run that /api/live and the event stream /api/live/events push
// (asked for only where the server says there is one: <body data-live="yes">).
// Plain DOM, no library; every string from a run goes in as text, never as HTML (dom.js: api, el, fmt).
"use strict";

const colour = window.MjflTimeline.colour; // the job colours, the timeline's own (timeline.js loads first)
const SVG = "http://www.w3.org/2000/svg";
const runCache = new Map();

async function runView(id) {
  if (!runCache.has(id)) runCache.set(id, api("api/runs/" + encodeURIComponent(id)));
  return runCache.get(id);
}

function status(text) { document.getElementById("status").textContent = text; }

// --- runs -------------------------------------------------------------------

async function loadRuns() {
  const runs = await api("api/runs");
  const body = document.querySelector("#runs tbody");
  body.replaceChildren();
  for (const run of runs) {
    const row = document.createElement("tr");
    row.dataset.id = run.id;
    const pick = el("input");
    pick.type = "checkbox";
    pick.addEventListener("click", (event) => { event.stopPropagation(); compare(); });
    const cell = el("td"); cell.append(pick);
    row.append(...runCells(run, cell, run.folder, reachedIn(run.total_time_s)));
    row.addEventListener("click", () => openRun(run.id));
    body.append(row);
  }
  status(runs.length + " run" + (runs.length === 1 ? "" : "s"));
}

// A row of the runs list, a finished run's or the live run's: `first` (its own cell), where the run is, who ran it
// and each job's time to target, then `last` (the group's time, or the live run's devices).
function runCells(run, first, where, last) {
  const times = run.jobs.map((j) => j.job + ": " + reachedIn(j.time_to_target_s));
  const standing = run.lab ? " (" + run.lab.state + ")" : run.status === "interrupted" ? " (interrupted)" : "";
  const cells = [where, run.run_id + standing, run.label, run.seed, run.mode, run.started_at, times.join(", ")].map((text) => el("td", text));
  return [first, ...cells, el("td", last, "num")];
}

function reachedIn(seconds) { return seconds === null ? "not reached" : fmt(seconds) + " s"; }

async function compare() {
  const ids = [...document.querySelectorAll("#runs tbody input:checked")].map((b) => b.closest("tr").dataset.id);
  const box = document.getElementById("compare");
  box.replaceChildren();
  if (ids.length < 2) return;
  const views = await Promise.all(ids.map(runView));
  const names = [...new Set(views.flatMap((v) => v.jobs.map((j) => j.job)))];
  for (const name of names) {
    const lines = [];
    let target = null;
    views.forEach((view, i) => {
      const job = view.jobs.find((j) => j.job === name);
      if (!job) return;
      target = target ?? job.target.accuracy;
      lines.push({ label: view.run.label + " · " + view.run.run_id, colour: colour(i), x: job.series.time_s, y: job.series.accuracy });
    });
    box.append(el("h3", "Accuracy of " + name + " (compared)"), chart(lines, target));
  }
}

// --- one run ----------------------------------------------------------------

async function openRun(id) {
  const started = performance.now();
  // A run's timeline is asked for with its view, not after it: the two arrive together.
  if (id !== "live" && timeline.run !== id) timeline.early = { id, asked: api("api/runs/" + encodeURIComponent(id) + "/timeline?since=0") };
  drawRun(id === "live" ? live.view : await runView(id));
  status(devices.rows.length + " devices drawn in " + Math.round(performance.now() - started) + " ms");
}

function drawRun(view) {
  const run = view.run;
  opened = run.id;
  document.querySelectorAll("#runs tbody tr").forEach((r) => r.classList.toggle("open", r.dataset.id === run.id));
  document.getElementById("run-title").textContent = run.id === "live"
    ? "live: " + run.label + " · " + run.run_id + " (seed " + run.seed + ", " + run.status + ")"
    : run.label + " · " + run.run_id + " (" + (run.seed === null ? "" : "seed " + run.seed + ", ") + run.folder + ")"
      + (run.status === "interrupted" ? ", interrupted" : "");
  drawStanding(run);
  const jobs = document.getElementById("jobs");
  jobs.replaceChildren();
  if (view.jobs.length === 0) {
    jobs.append(el("p", run.lab ? "Nothing recorded yet." : "No jobs: a profiling session's calibration tasks are counted in each device's rounds.", "hint"));
  }
  for (const job of view.jobs) {
    const box = el("div", null, "job");
    const goal = job.target.accuracy !== null ? "accuracy ≥ " + job.target.accuracy : job.target.loss !== null ? "loss ≤ " + job.target.loss : "none";
    const target = goal !== "none" && job.target.window > 1 ? goal + " (the mean of " + job.target.window + " rounds)" : goal;
    const reached = job.time_to_target_s === null ? "not reached" : "reached at " + fmt(job.time_to_target_s) + " s";
    box.append(el("h3", job.job + " (" + job.model + " on " + job.dataset + ")"),
      el("p", "target " + target + ", " + reached + "; rounds " + job.rounds + " of " + job.max_rounds + " (" + job.rounds_left + " left in the budget); final accuracy " + fmt(job.final_accuracy, 3)
        + "; energy to target " + energyText(job)),
      chart([{ label: job.job, colour: colour(0), x: job.series.time_s, y: job.series.accuracy }], job.target.accuracy),
      chart([{ label: job.job + " loss", colour: colour(1), x: job.series.time_s, y: job.series.loss }], job.target.loss, "loss"));
    jobs.append(box);
  }
  devices.rows = view.devices;
  drawDevices();
  events.rows = view.events || [];
  drawEvents();
  drawChoices(view.choices);
  drawProvenance(view.provenance);
  document.getElementById("run-section").hidden = false;
  drawTimeline(view);
  reread(run);
}

// --- the device timeline (timeline.js): fetched apart from the run's view, whose live pushes carry only its bar count ---

const timeline = { chart: null, run: null, have: null, fetching: false, early: null };

// Fetch the bars the opened run's timeline lacks (all of an ended run's, once; a live run's new ones) and draw them.
function drawTimeline(view) {
  const id = view.run.id;
  if (timeline.run !== id) Object.assign(timeline, { run: id, have: null });
  const have = timeline.have ?? 0;
  // A live push says how many bars there are; a run read again while it runs (a lab's) may have more at any read.
  const bars = view.timeline_bars ?? (ended(view.run) ? have : Infinity);
  if (timeline.fetching || (timeline.have !== null && bars <= have)) return;
  timeline.fetching = true;
  const early = timeline.early && timeline.early.id === id && have === 0 ? timeline.early.asked : null;
  timeline.early = null;
  (early || api(runPath() + "/timeline?since=" + have)).then((part) => {
    if (timeline.run !== id) return;
    if (timeline.have === null) timeline.chart.update(part); else timeline.chart.append(part);
    timeline.have = part.total;
  }).catch((error) => status(String(error))).finally(() => {
    timeline.fetching = false;
    if (timeline.run === id && id === "live" && live.view.timeline_bars > timeline.have) drawTimeline(live.view);
  });
}

// Whether a run read from its database records nothing more: finished or interrupted; a lab's, once its state in the
// lab is final (one stopped with the service is interrupted until the service resumes it).
const FINAL = ["completed", "failed", "cancelled", "abandoned"];

function ended(run) {
  return run.lab ? FINAL.includes(run.lab.state) : run.status === "finished" || run.status === "interrupted";
}

// Where a lab's run stands (run.lab: its state and why it waits or ended), above its page; hidden for others.
function drawStanding(run) {
  const box = document.getElementById("run-standing");
  box.hidden = !run.lab;
  if (!run.lab) return;
  const lab = run.lab;
  box.className = "standing " + lab.state;
  box.textContent = lab.state + (lab.reason ? ": " + lab.reason : "") + (lab.owner ? " (" + lab.owner + "'s run)" : "");
}

// --- the live run -------------------------------------------------------------

let opened = null; // the id of the run drawn below the list ("live" for the live one)

// Where the API serves the opened run's parts: the live run's, or another run's.
function runPath() { return opened === "live" ? "api/live" : "api/runs/" + encodeURIComponent(opened); }

const live = { view: null, source: null, row: null };

// The live run, where the server has one (it says so in the page): a row above the others, opened at once,
// redrawn on each push.
async function startLive() {
  if (document.body.dataset.live !== "yes") return;
  const view = await api("api/live");
  showLive(view);
  if (opened === null) drawRun(view);
  if (typeof EventSource === "undefined") return;
  // EventSource sends no headers: the token goes in the query, which the server also accepts.
  live.source = new EventSource("api/live/events" + (TOKEN ? "?token=" + encodeURIComponent(TOKEN) : ""));
  live.source.addEventListener("run", (event) => {
    const next = JSON.parse(event.data);
    showLive(next);
    if (opened === "live") drawRun(next);
  });
  live.source.addEventListener("error", () => status("live run: the stream is closed (the run ended?)"));
}

function showLive(view) {
  live.view = view;
  const run = view.run;
  let row = live.row;
  if (!row) {
    row = live.row = document.createElement("tr");
    row.className = "live";
    row.dataset.id = "live";
    row.addEventListener("click", () => openRun("live"));
    document.querySelector("#runs tbody").prepend(row);
  }
  const offline = view.devices.filter((d) => d.state === "offline").length;
  row.replaceChildren(...runCells(run, el("td"), "live (" + run.status + ")", view.devices.length + " devices, " + offline + " offline"));
}

// A job's energy to target: joules, and how many of its device rounds told one when not all did.
function energyText(job) {
  if (job.energy_to_target_j === null) return "—";
  const part = job.energy_known < job.energy_device_rounds ? " (" + job.energy_known + " of " + job.energy_device_rounds + " device rounds known)" : "";
  return fmt(job.energy_to_target_j, 1) + " J" + part;
}

const devices = { rows: [], key: "device", ascending: true };

function drawDevices() {
  const filter = document.getElementById("device-filter").value.trim().toLowerCase();
  const { key, ascending } = devices;
  const matches = (d) => [d.device, d.kind, d.model, d.os, d.state, d.last_failure].some((v) => (v || "").toLowerCase().includes(filter));
  const rows = devices.rows.filter((d) => !filter || matches(d));
  // Only a run whose devices are followed (the live run, a lab's) has states: elsewhere the column is left out.
  const stated = devices.rows.some((d) => d.state !== undefined && d.state !== null);
  rows.sort((a, b) => {
    const x = a[key], y = b[key];
    if (x === y) return 0;
    if (x === null) return 1; // blanks last either way
    if (y === null) return -1;
    return (x < y ? -1 : 1) * (ascending ? 1 : -1);
  });
  const body = document.createElement("tbody");
  for (const d of rows) {
    const row = document.createElement("tr");
    row.dataset.device = d.device;
    row.addEventListener("click", () => openLog(d.device));
    row.append(el("td", d.device), el("td", d.kind), el("td", d.model), el("td", d.os), el("td", d.rounds, "num"), el("td", d.ok, "num"), el("td", d.failed, d.failed ? "num failed" : "num"),
      el("td", d.rejected, "num"), el("td", d.last_failure), el("td", fmt(d.last_round_s, 2), "num"), el("td", fmt(d.expected_round_s, 2), "num"),
      el("td", fmt(d.battery_pct, 0), "num"), el("td", d.charging === null ? "" : d.charging ? "yes" : "no"), el("td", fmt(d.thermal_status), "num"),
      el("td", d.energy ?? fmt(d.energy_j, 1), "num"), el("td", d.state ?? "", d.state === "offline" ? "offline" : ""));
    row.children[row.children.length - 1].hidden = !stated;
    body.append(row);
  }
  document.querySelector("#devices tbody").replaceWith(body);
  document.querySelectorAll("#devices th").forEach((th) => { if (th.dataset.key === "state") th.hidden = !stated; });
  document.getElementById("device-count").textContent = rows.length + " of " + devices.rows.length;
  document.querySelectorAll("#devices th").forEach((th) => {
    th.classList.toggle("asc", th.dataset.key === key && ascending);
    th.classList.toggle("desc", th.dataset.key === key && !ascending);
  });
}

// --- events: joins, leaves, refused connections, failures and refused updates, oldest first ---

const events = { rows: [] };

function drawEvents() {
  const kind = document.getElementById("event-kind").value;
  const rows = events.rows.filter((e) => !kind || e.kind === kind);
  const body = document.createElement("tbody");
  for (const e of rows) {
    const row = document.createElement("tr");
    row.className = "event " + e.kind;
    row.append(el("td", fmt(e.at_s, 1), "num"), el("td", e.kind === "rejected" ? "refused update" : e.kind), el("td", e.device ?? ""),
      el("td", e.job ?? ""), el("td", e.round ?? "", "num"), el("td", e.detail));
    body.append(row);
  }
  document.querySelector("#events tbody").replaceWith(body);
  document.getElementById("event-count").textContent = rows.length + " of " + events.rows.length;
}

// --- a device's recent log lines (its phone's app log, else the run log's lines naming it) ---

async function openLog(device) {
  const path = runPath() + "/devices/" + encodeURIComponent(device) + "/log";
  const box = document.getElementById("device-log");
  document.getElementById("device-log-title").textContent = "Log of " + device;
  box.hidden = false;
  try {
    const log = await api(path);
    document.getElementById("device-log-source").textContent = log.source === null ? "no log kept for this device"
      : "the newest " + log.lines.length + " lines of " + log.source + " naming it";
    document.getElementById("device-log-lines").textContent = log.lines.join("\n");
  } catch (error) {
    document.getElementById("device-log-source").textContent = String(error);
    document.getElementById("device-log-lines").textContent = "";
  }
}

function drawChoices(choices) {
  const body = document.createElement("tbody");
  for (const c of choices) {
    const members = c.members.map((m) => (m.won ? "*" : "") + m.member + " " + fmt(m.cost, 3)).join(", ");
    const row = document.createElement("tr");
    row.addEventListener("click", () => openRound(c.job, c.round).catch((error) => status(String(error))));
    row.append(el("td", c.job), el("td", c.round, "num"), el("td", c.winner ?? ""), el("td", members), el("td", c.planned, "num"),
      el("td", c.answered, c.answered < c.planned ? "num failed" : "num"), el("td", c.used, "num"), el("td", fmt(c.expected_time_s, 2), "num"), el("td", fmt(c.time_s, 2), "num"));
    body.append(row);
  }
  document.querySelector("#choices tbody").replaceWith(body);
}

// --- one round: who was planned, and what each answered ---------------------------

const ANSWERS = { ok: "used", rejected: "update refused", failed: "no answer" };

// A round of the opened run (state.round_devices), asked for once: by a click on its row, or a hovered bar.
const rounds = new Map();

function roundOf(job, number) {
  const key = JSON.stringify([opened, job, number]);
  if (!rounds.has(key)) {
    const asked = api(runPath() + "/rounds/" + encodeURIComponent(job) + "/" + number);
    asked.catch(() => rounds.delete(key));  // asked again next time
    rounds.set(key, asked);
  }
  return rounds.get(key);
}

async function openRound(job, number) {
  const round = await roundOf(job, number);
  document.getElementById("round-title").textContent = "Round " + round.round + " of " + round.job
    + (round.winner ? " (plan kept: " + round.winner + ")" : "") + ": " + round.devices.length + " planned";
  const body = document.createElement("tbody");
  for (const d of round.devices) {
    const row = document.createElement("tr");
    row.append(el("td", d.device), el("td", ANSWERS[d.status] ?? d.status, d.status === "ok" ? "" : "failed"), el("td", d.error),
      el("td", d.samples, "num"), el("td", fmt(d.wait_s, 2), "num"), el("td", fmt(d.time_s, 2), "num"), el("td", fmt(d.download_s, 2), "num"),
      el("td", fmt(d.compute_s, 2), "num"), el("td", fmt(d.upload_s, 2), "num"), el("td", fmt(d.mean_loss, 3), "num"), el("td", d.energy ?? fmt(d.energy_j, 1), "num"));
    body.append(row);
  }
  document.querySelector("#round-devices tbody").replaceWith(body);
  document.getElementById("round-detail").hidden = false;
}

// --- the chart: accuracy (or loss) over run time, one path per line, the target dashed ----

function chart(lines, target, measure = "accuracy") {
  const W = 640, H = 260, L = 48, R = 12, T = 10, B = 36;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.classList.add("chart", measure);
  const xs = lines.flatMap((l) => l.x).filter((v) => v !== null);
  const xMax = Math.max(1e-9, ...xs);
  // Accuracy is in [0, 1]; a loss is drawn up to its largest value (or its target, if above).
  const ys = lines.flatMap((l) => l.y).filter((v) => v !== null);
  const yMax = measure === "accuracy" ? 1 : Math.max(1e-9, target ?? 0, ...ys) * 1.05;
  const sx = (x) => L + (x / xMax) * (W - L - R);
  const sy = (y) => T + (1 - y / yMax) * (H - T - B);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  for (let i = 0; i <= 5; i++) {
    const y = (yMax * i) / 5;
    add("line", { x1: L, x2: W - R, y1: sy(y), y2: sy(y), class: "grid" });
    add("text", { x: L - 6, y: sy(y) + 4, "text-anchor": "end" }, y.toFixed(yMax / 5 >= 1 ? 0 : yMax / 5 >= 0.1 ? 1 : 2));
    const x = (xMax * i) / 5;
    add("text", { x: sx(x), y: H - B + 16, "text-anchor": "middle" }, fmt(x, x < 10 ? 1 : 0));
  }
  add("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" });
  add("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" });
  add("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, "run time (s)");
  add("text", { x: W - R, y: T + 10, "text-anchor": "end" }, measure);
  if (target !== null && target !== undefined) add("line", { x1: L, x2: W - R, y1: sy(target), y2: sy(target), class: "target" });
  for (const line of lines) {
    let d = "", pen = "M";
    line.x.forEach((x, i) => {
      const y = line.y[i];
      if (x === null || y === null) { pen = "M"; return; } // a NaN accuracy breaks the line
      d += `${pen}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
      pen = "L";
    });
    add("path", { d, class: "line", stroke: line.colour }).append(Object.assign(document.createElementNS(SVG, "title"), { textContent: line.label }));
  }
  const box = el("div");
  box.append(svg);
  if (lines.length > 1) box.append(legend(lines));
  return box;
}

function legend(lines) {
  const box = el("div", null, "legend");
  for (const line of lines) {
    const item = el("span");
    const swatch = el("i");
    swatch.style.background = line.colour;
    item.append(swatch, document.createTextNode(line.label));
    box.append(item);
  }
  return box;
}

document.addEventListener("DOMContentLoaded", () => {
  // A hovered bar's details: its device's entry of its round.
  const details = (bar) => roundOf(bar.job, bar.round).then((round) => round.devices.find((d) => d.device === bar.device) || null);
  timeline.chart = window.MjflTimeline.mount(document.getElementById("timeline"), { details });
  document.querySelectorAll("#devices th").forEach((th) => th.addEventListener("click", () => {
    devices.ascending = devices.key === th.dataset.key ? !devices.ascending : true;
    devices.key = th.dataset.key;
    drawDevices();
  }));
  document.getElementById("device-filter").addEventListener("input", drawDevices);
  document.getElementById("event-kind").addEventListener("change", drawEvents);
  document.getElementById("round-close").addEventListener("click", () => { document.getElementById("round-detail").hidden = true; });
  document.getElementById("device-log-close").addEventListener("click", () => { document.getElementById("device-log").hidden = true; });
  loadRuns().then(startLive).then(openLinked).catch((error) => status(String(error)));
});

// A run named in the address (#<run id>, as the lab's page of `mjfl serve` links its runs) opens at once.
async function openLinked() {
  const id = decodeURIComponent((location.hash || "").slice(1));
  if (id && opened === null) await openRun(id);
}

// A run read from its database that has not ended (a lab's running or queued run) is read again every REFRESH_MS while open.
const REFRESH_MS = 2000;
let rereading = null;

function reread(run) {
  if (rereading !== null) clearTimeout(rereading);
  rereading = null;
  if (run.id === "live" || ended(run)) return;
  rereading = setTimeout(async () => {
    if (opened !== run.id) return;
    runCache.delete(run.id);
    try {
      const view = await runView(run.id);
      if (opened === run.id) drawRun(view);
    } catch (error) { status(String(error)); }
  }, REFRESH_MS);
}

// --- provenance: what the run ran on (versions, configuration, programs, devices as admitted) ---

function drawProvenance(doc) {
  const panel = document.getElementById("provenance");
  panel.hidden = !doc;  // a live run, or one recorded before mjfl kept it
  if (!doc) return;
  const body = document.getElementById("provenance-body");
  const v = doc.versions;
  const config = doc.config;
  const text = el("pre", config.text === null ? "(not from a file)" : config.text, "config");
  body.replaceChildren(
    el("p", Object.entries(v).map(([name, version]) => name + " " + (version ?? "none")).join(", ")),
    el("p", "configuration " + (config.file ?? "not from a file") + (config.sha256 ? ", sha256 " + config.sha256 : "")
      + (config.redacted.length ? " (left out: " + config.redacted.join(", ") + ")" : "")),
    text,
    provenanceTable(["job", "program sha256", "bytes", "shard sizes"],
      doc.programs.map((p) => [p.job, p.sha256, p.size, p.shard_samples.join(" ")])),
    provenanceTable(["device", "admitted", "shard", "model", "os", "runtime", "planned a (s)", "planned mu", "profile from", "app"],
      doc.devices.map((d) => {
        const hw = (d.hello && d.hello.hardware) || {};
        const app = d.app.sha256 ? d.app.sha256 + " (" + d.app.source + ")" : d.app.absent ? "no app: " + d.app.absent : "unknown: " + d.app.missing;
        return [d.device, d.admitted_at, d.shard ?? "none", hw.model ?? (d.hello ? "" : "simulated"), hw.os ?? "",
          d.hello ? d.hello.runtime : "", fmt(d.profile.a, 4), fmt(d.profile.mu, 1), d.profile.source, app];
      })));
}

function provenanceTable(head, rows) {
  const top = el("tr");
  head.forEach((h) => top.append(el("th", h)));
  const thead = el("thead");
  thead.append(top);
  const tbody = el("tbody");
  for (const cells of rows) {
    const row = el("tr");
    cells.forEach((c) => row.append(el("td", c)));
    tbody.append(row);
  }
  const table = el("table");
  table.append(thead, tbody);
  return table;
}
