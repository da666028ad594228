// The lab's page of `mjfl serve`: draws what /lab/state sends (lab/view.py's shape) and asks again every REFRESH_MS;
// the lab's timeline (/lab/timeline) goes to the timeline component where it is installed (timeline.js).
// A run's row opens its page, the run dashboard's (../runs/#<run>). Plain DOM (dom.js: api, el, fmt); every string from the lab goes in as text.
"use strict";

const QUERY = TOKEN ? "?token=" + encodeURIComponent(TOKEN) : "";
// Polled, not streamed: the lab's state is spread over its database and each running run's (pages.py).
const REFRESH_MS = 1500;
const lab = { timeline: null, shown: null };

function num(value, digits) { return el("td", fmt(value, digits), "num"); }

function when(iso) { return iso ? iso.replace("T", " ").replace(/\.\d+.*$/, "") : ""; }

function runPage(id) { return "../runs/" + QUERY + "#" + encodeURIComponent(id); }

// A run's cell: a link to its page.
function runCell(id) {
  const cell = el("td");
  const link = el("a", id);
  link.href = runPage(id);
  cell.append(link);
  return cell;
}

function fill(id, rows) {
  const body = document.createElement("tbody");
  body.append(...rows);
  document.querySelector("#" + id + " tbody").replaceWith(body);
}

function row(cells, run) {
  const tr = document.createElement("tr");
  tr.append(...cells);
  if (run) {
    tr.dataset.run = run;
    tr.addEventListener("click", (event) => { if (event.target.tagName !== "A") location.href = runPage(run); });
  }
  return tr;
}

function drawDevices(devices) {
  fill("lab-devices", devices.map((d) => {
    const tr = row([el("td", d.device), el("td", d.state, d.state), d.run ? runCell(d.run) : el("td"), el("td", d.job),
      el("td", d.kind), el("td", d.model), el("td", d.os), num(d.rounds), num(d.ok), el("td", d.failed, d.failed ? "num failed" : "num"),
      num(d.rejected), el("td", d.last_failure), num(d.last_round_s, 2), num(d.battery_pct, 0),
      el("td", d.charging === null ? "" : d.charging ? "yes" : "no"), num(d.thermal_status), el("td", d.energy ?? "", "num"),
      el("td", d.connected_at ? new Date(d.connected_at * 1000).toLocaleTimeString() : ""), el("td", d.address)]);
    tr.dataset.device = d.device;
    return tr;
  }));
}

function drawQueue(queue) {
  fill("queue", queue.map((r) => row([num(r.position), runCell(r.id), el("td", r.owner), el("td", r.method), num(r.needs),
    el("td", r.reason), el("td", when(r.submitted_at))], r.id)));
}

function progress(job) {
  const target = job.target.accuracy !== null ? fmt(job.target.accuracy, 3) : job.target.loss !== null ? "loss ≤ " + fmt(job.target.loss, 3) : "none";
  const reached = job.time_to_target_s === null ? "" : ", reached at " + fmt(job.time_to_target_s) + " s";
  const accuracy = job.accuracy === null ? "—" : fmt(job.accuracy, 3);
  return job.job + ": round " + job.rounds + " of " + job.max_rounds + ", accuracy " + accuracy + " (target " + target + ")" + reached;
}

function drawRunning(running) {
  fill("running", running.map((r) => row([runCell(r.id), el("td", r.owner), el("td", r.method), el("td", r.state + (r.reason ? ": " + r.reason : "")),
    el("td", when(r.started_at)), el("td", r.jobs.map(progress).join("; "), "jobs")], r.id)));
}

function drawShares(shares) {
  fill("shares", shares.map((s) => row([el("td", s.owner), num(s.runs), num(s.device_s, 1),
    el("td", s.fraction === null ? "" : (100 * s.fraction).toFixed(1) + " %", "num")])));
}

function drawFinished(finished) {
  fill("finished", finished.map((r) => row([runCell(r.id), el("td", r.owner), el("td", r.method), el("td", r.state, r.state === "failed" ? "failed" : ""),
    el("td", r.targets_reached === null ? "" : r.targets_reached ? "reached" : "not reached", r.targets_reached ? "reached" : ""),
    el("td", when(r.ended_at)), el("td", r.reason)], r.id)));
}

function counted(n, noun) { return n + " " + noun + (n === 1 ? "" : "s"); }

function drawLab(state) {
  const l = state.lab;
  document.getElementById("lab-summary").textContent = counted(l.devices, "device") + " connected; runs: " + l.running
    + " running of at most " + l.max_running + ", " + l.queued + " queued; devices shared: " + l.share + (l.draining ? "; draining" : "");
  drawDevices(state.devices);
  drawQueue(state.queue);
  drawRunning(state.running);
  drawShares(state.shares);
  drawFinished(state.finished);
}

// The lab's timeline, where the timeline component is installed (the page works without it): every shown run's device
// rounds on the wall clock, following the runs going unless zoomed out. Its data is asked for again only when a round
// ended or a run did: a bar is a device round, recorded when its round ends.
async function drawTimeline(state) {
  if (!window.MjflTimeline) return;
  const shown = JSON.stringify([state.running.map((r) => [r.id, r.jobs.map((j) => j.rounds)]), state.finished.length]);
  if (shown === lab.shown) return;
  const data = await api("timeline");
  lab.timeline = lab.timeline || window.MjflTimeline.mount(document.getElementById("lab-timeline"), { details: roundDevice });
  lab.timeline.update(data);
  lab.shown = shown;
}

// A hovered bar's details: its device's entry of its round, as the run's page serves it (../runs/, state.round_devices).
const rounds = new Map();

function roundDevice(bar) {
  const path = "../runs/api/runs/" + encodeURIComponent(bar.run) + "/rounds/" + encodeURIComponent(bar.job) + "/" + bar.round;
  if (!rounds.has(path)) {
    const asked = api(path);
    asked.catch(() => rounds.delete(path));
    rounds.set(path, asked);
  }
  return rounds.get(path).then((round) => round.devices.find((d) => d.device === bar.device) || null);
}

async function refresh() {
  try {
    const state = await api("state");
    drawLab(state);
    await drawTimeline(state);
    document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    document.getElementById("status").textContent = String(error);
  }
  setTimeout(refresh, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", refresh);
