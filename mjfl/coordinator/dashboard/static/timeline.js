// The device timeline: one row per device, time across, each device round a bar coloured by its job, drawn on a <canvas>.
// Independent of the page around it (app.js, the lab page): one global, window.MjflTimeline.
//
//   const timeline = MjflTimeline.mount(container);  // builds its summary, legend, canvas and tooltip in `container`
//   timeline.update(data);                           // draws `data`, in place of what it drew
//   timeline.append(data);                           // adds `data`'s bars to what it drew (a live run's new ones)
//
// data (dashboard/timeline.py builds it; /api/runs/{id}/timeline, /api/live/timeline and /lab/timeline serve it):
//   { devices: [id, ...],            // the rows, top to bottom; a bar's `device` is an index here
//     jobs: [key, ...],              // a bar's `job` is an index here; its key gives its colour
//     runs?: [run, ...], job_runs?: [i, ...],  // the lab's: each job's run (an index into runs), its colour's hue
//     statuses: ["ok", "failed", "rejected"], errors: [null, text, ...],  // a bar's status and error: indices here
//     bars: { device: [i], job: [i], round: [n], start_s: [s], end_s: [s], status: [i],   // one entry a bar
//             samples?, wait_s?, duration_s?, download_s?, compute_s?, upload_s?, loss?, error? },  // for hovering
//     origin?: unix_s,               // times are seconds from it (the lab's wall clock): the axis says the time of day
//     live?: [start_s, end_s],       // what the view follows unless zoomed (the lab's runs going)
//     utilisation?: { span_s, fleet, devices: {id: fraction}, own_fleet?, runs? } }  // results/utilisation.py
//
// A bar is filled (used), hatched (failed: no answer) or outlined (its update refused). Wheel zooms in time around
// the pointer, a drag pans, a double-click shows the whole history (again: back to following what is live); hovering
// a bar shows its round's details. An unzoomed view follows what is live (`live`, else every bar) as bars come.
// Colours: a job's by its index (COLOURS, then hues spread by the golden angle); with runs, a hue per run (spread
// the same way, so no two runs share one however many there are) and a shade per job of the run.
// Test hooks: container.dataset.bars (bars held), .jobs (JSON: bars per key), .renderMs (the last update's or
// redraw's time, indexing included); container.mjflTimeline.centre(i): the viewport coordinates of bar i's middle,
// to hover it (scrolled into view first); .view(): the times shown, [from, to].
"use strict";

(function () {
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const GOLDEN = 137.508;     // degrees: hues this far apart never meet again, and neighbours differ most
  const SHADES = [42, 60, 30, 72, 52];  // lightness (%) of a run's jobs, first to fifth
  const ROW_MAX = 16;         // px: a row's height when the devices fit
  const PLOT_MAX = 560;       // px: the rows' height at most (1,000 devices share it)
  const AXIS = 22, LABELS = 120, BUSY = 76, NEAR = 3;  // px: time axis, device ids, busy column, hover slack
  const STATUS = { ok: "used", failed: "no answer", rejected: "update refused" };
  const DETAILS = ["samples", "wait_s", "duration_s", "download_s", "compute_s", "upload_s", "loss"];

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function seconds(value, digits = 2) { return value === null || value === undefined ? "—" : value.toFixed(digits) + " s"; }
  function percent(value) { return value === null || value === undefined ? "—" : Math.round(value * 100) + "%"; }

  // Colour i of a list (the charts' lines, a job's bars): COLOURS, then a hue each by the golden angle.
  function colour(i) { return i < COLOURS.length ? COLOURS[i] : "hsl(" + ((i * GOLDEN) % 360).toFixed(1) + ", 62%, 45%)"; }

  // What the component holds: the bars as columns, in the order they came, and the names their indices stand for.
  function empty() {
    const bars = { device: [], job: [], round: [], start: [], end: [], status: [], error: [] };
    DETAILS.forEach((name) => { bars[name] = []; });
    return { rows: new Map(), keys: new Map(), keyRun: [], runs: new Map(), bars, n: 0, origin: null, live: null,
      utilisation: null };
  }

  // Add `data`'s bars to `held`, its indices turned into held's (a part's devices, jobs and errors are its own).
  function add(held, data) {
    const part = data.bars || {};
    const count = (part.round || []).length;
    (data.devices || []).forEach((d) => { if (!held.rows.has(d)) held.rows.set(d, held.rows.size); });
    const rows = (data.devices || []).map((d) => held.rows.get(d));
    const keys = (data.jobs || []).map((key, j) => {
      if (!held.keys.has(key)) {
        held.keys.set(key, held.keys.size);
        const run = data.runs && data.job_runs ? data.runs[data.job_runs[j]] : null;
        if (run !== null && !held.runs.has(run)) held.runs.set(run, held.runs.size);
        held.keyRun.push(run);
      }
      return held.keys.get(key);
    });
    const statuses = data.statuses || ["ok", "failed", "rejected"], errors = data.errors || [null];
    const b = held.bars;
    for (let i = 0; i < count; i++) {
      b.device.push(rows[part.device[i]]); b.job.push(keys[part.job[i]]); b.round.push(part.round[i]);
      b.start.push(part.start_s[i]); b.end.push(part.end_s[i]); b.status.push(statuses[part.status[i]]);
      b.error.push(part.error ? errors[part.error[i]] : null);
      for (const name of DETAILS) b[name].push(part[name] ? part[name][i] : undefined);
    }
    held.n += count;
    if (data.origin !== undefined) held.origin = data.origin;
    if (data.live !== undefined) held.live = data.live;
    if (data.utilisation !== undefined) held.utilisation = data.utilisation;
  }

  // The bars as drawn: grouped by colour and status, each row's by start (for hovering), the span of them all.
  function index(held) {
    const b = held.bars, groups = new Map(), counts = {}, byRow = [];
    const names = [...held.keys.keys()];
    let first = Infinity, last = -Infinity;
    for (let i = 0; i < held.n; i++) {
      const group = b.job[i] + ":" + (STATUS[b.status[i]] ? b.status[i] : "ok");
      if (!groups.has(group)) groups.set(group, []);
      groups.get(group).push(i);
      counts[names[b.job[i]]] = (counts[names[b.job[i]]] || 0) + 1;
      (byRow[b.device[i]] = byRow[b.device[i]] || []).push(i);
      if (b.start[i] < first) first = b.start[i];
      if (b.end[i] > last) last = b.end[i];
    }
    byRow.forEach((own) => own.sort((x, y) => b.start[x] - b.start[y]));
    if (!(last > first)) { first = Number.isFinite(first) ? first : 0; last = first + 1; }
    const colours = names.map((_, k) => keyColour(held, k));
    return { groups, counts, byRow, colours, full: [first, last] };
  }

  // A job's colour: by its index, or, with runs, its run's hue and a shade per job of that run.
  function keyColour(held, k) {
    const run = held.keyRun[k];
    if (run === null || run === undefined) return colour(k);
    const r = held.runs.get(run);
    const nth = held.keyRun.slice(0, k).filter((other) => other === run).length;
    return "hsl(" + ((r * GOLDEN) % 360).toFixed(1) + ", 65%, " + SHADES[nth % SHADES.length] + "%)";
  }

  // What an unzoomed view shows: what is live (a little room each side), else everything.
  function followed(held, drawn) {
    if (!held.live) return drawn.full.slice();
    const [from, to] = held.live, pad = Math.max((to - from) * 0.02, 0.5);
    return [from - pad, to + pad];
  }

  // A fill of diagonal stripes in a job's colour: a failed round.
  function hatch(ctx, fill) {
    const tile = document.createElement("canvas");
    tile.width = tile.height = 6;
    const t = tile.getContext("2d");
    t.fillStyle = "#fff";
    t.fillRect(0, 0, 6, 6);
    t.strokeStyle = fill;
    t.lineWidth = 2;
    t.beginPath(); t.moveTo(0, 6); t.lineTo(6, 0); t.moveTo(-1, 1); t.lineTo(1, -1); t.moveTo(5, 7); t.lineTo(7, 5); t.stroke();
    return ctx.createPattern(tile, "repeat");
  }

  function mount(container) {
    const summary = el("p", "timeline-summary");
    const legend = el("div", "timeline-legend");
    const wrap = el("div", "timeline-wrap");
    const canvas = el("canvas", "timeline-canvas");
    const tip = el("div", "timeline-tip");
    tip.hidden = true;
    wrap.append(canvas, tip);
    container.replaceChildren(summary, legend, wrap);
    const state = { held: empty(), drawn: index(empty()), view: null, follow: true, layout: null, pending: 0 };
    const redraw = () => {
      if (state.pending) return;
      state.pending = requestAnimationFrame(() => { state.pending = 0; draw(canvas, state, container); });
    };
    listen(canvas, tip, state, redraw);
    const shown = (started) => {
      state.drawn = index(state.held);
      if (state.follow || state.view === null) state.view = followed(state.held, state.drawn);
      drawLegend(legend, state);
      drawSummary(summary, state.held);
      container.dataset.bars = String(state.held.n);
      container.dataset.jobs = JSON.stringify(state.drawn.counts);
      draw(canvas, state, container, started);
    };
    const handle = {
      update(data) { const started = performance.now(); state.held = empty(); add(state.held, data); shown(started); },
      append(data) { const started = performance.now(); add(state.held, data); shown(started); },
      centre(i) { return centre(canvas, state, i); },
      view() { return state.view.slice(); },
    };
    container.mjflTimeline = handle;
    window.addEventListener("resize", redraw);
    return handle;
  }

  function drawLegend(box, state) {
    const held = state.held;
    const items = [...held.keys.keys()].map((key, k) => {
      const item = el("span", null, key);
      const swatch = el("i");
      swatch.style.background = state.drawn.colours[k];
      item.prepend(swatch);
      return item;
    });
    const whole = held.live ? "double-click: whole history (again: follow the runs going)" : "double-click: whole run";
    items.push(el("span", "timeline-failed", "failed: hatched"), el("span", "timeline-rejected", "update refused: outlined"),
      el("span", "hint", "wheel: zoom · drag: pan · " + whole));
    box.replaceChildren(...items);
  }

  function drawSummary(box, held) {
    const busy = held.utilisation;
    if (!busy || busy.fleet === null || busy.fleet === undefined) {
      box.textContent = held.n + " device rounds";
      return;
    }
    const ranked = Object.entries(busy.devices).filter(([, f]) => f !== null).sort((a, b) => a[1] - b[1]);
    const ends = ranked.length ? "; least busy " + ranked[0][0] + " " + percent(ranked[0][1]) + ", most busy "
      + ranked[ranked.length - 1][0] + " " + percent(ranked[ranked.length - 1][1]) : "";
    const whose = busy.own_fleet !== undefined
      ? " on any run's jobs (" + busy.runs + " run" + (busy.runs === 1 ? "" : "s") + "; this run's alone " + percent(busy.own_fleet) + ")"
      : held.runs.size ? " on the shown runs' jobs" : "";
    box.textContent = held.n + " device rounds; the fleet busy " + percent(busy.fleet) + whose + " of "
      + seconds(busy.span_s, 1) + " (" + ranked.length + " devices)" + ends;
  }

  // Where things go: the canvas's size, each row's height, time <-> x.
  function layout(canvas, state) {
    const n = Math.max(state.held.rows.size, 1);
    const width = Math.max(canvas.parentElement.clientWidth || 0, 480);
    const row = Math.min(ROW_MAX, PLOT_MAX / n);
    const plot = [LABELS, width - BUSY];
    const [t0, t1] = state.view;
    const scale = (plot[1] - plot[0]) / (t1 - t0);
    return { width, height: n * row + AXIS, row, plot, t0, t1, scale, x: (t) => plot[0] + (t - t0) * scale };
  }

  // Paint the canvas; container.dataset.renderMs: the time since `started` (an update's: indexing the data too).
  function draw(canvas, state, container, started = performance.now()) {
    const box = state.layout = layout(canvas, state);
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(box.width * ratio);
    canvas.height = Math.round(box.height * ratio);
    canvas.style.width = box.width + "px";
    canvas.style.height = box.height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, box.width, box.height);
    drawLanes(ctx, state.held, box);
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.plot[0], 0, box.plot[1] - box.plot[0], box.height - AXIS);
    ctx.clip();
    drawBars(ctx, state, box);
    ctx.restore();
    drawAxis(ctx, box, state.held.origin);
    drawBusy(ctx, state.held, box);
    container.dataset.renderMs = (performance.now() - started).toFixed(1);
  }

  // Each row's lane (alternate shading: the gaps between bars are the device's idle time) and its device id.
  function drawLanes(ctx, held, box) {
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (const [device, i] of held.rows) {
      const y = i * box.row;
      if (i % 2 === 0 && box.row >= 2) {
        ctx.fillStyle = "#f4f6f8";
        ctx.fillRect(box.plot[0], y, box.plot[1] - box.plot[0], box.row);
      }
      if (box.row >= 10) {
        ctx.fillStyle = "#333";
        ctx.fillText(device.length > 18 ? device.slice(0, 17) + "…" : device, 4, y + box.row / 2);
      }
    }
  }

  // The bars, one fill style per job and status: ok filled, failed hatched, rejected outlined. Out of view: skipped.
  function drawBars(ctx, state, box) {
    const b = state.held.bars, pad = box.row >= 4 ? 1 : 0, h = Math.max(box.row - 2 * pad, 0.6);
    for (const [group, bars] of state.drawn.groups) {
      const [k, status] = group.split(":");
      const fill = state.drawn.colours[Number(k)];
      ctx.fillStyle = status === "failed" ? hatch(ctx, fill) : status === "rejected" ? "#fff" : fill;
      ctx.strokeStyle = fill;
      ctx.lineWidth = 1.5;
      for (const i of bars) {
        if (b.end[i] < box.t0 || b.start[i] > box.t1) continue;
        const x = box.x(b.start[i]), w = Math.max(box.x(b.end[i]) - x, 1);
        const y = b.device[i] * box.row + pad;
        ctx.fillRect(x, y, w, h);
        if (status !== "ok" && h >= 3) ctx.strokeRect(x + 0.75, y + 0.75, Math.max(w - 1.5, 0), h - 1.5);
      }
    }
  }

  // The time axis: seconds on the run's clock, or with `origin` the time of day (the lab's wall clock).
  function drawAxis(ctx, box, origin) {
    const y = box.height - AXIS;
    ctx.strokeStyle = "#888";
    ctx.beginPath(); ctx.moveTo(box.plot[0], y + 0.5); ctx.lineTo(box.plot[1], y + 0.5); ctx.stroke();
    const span = box.t1 - box.t0, step = niceStep(span / 8);
    ctx.fillStyle = "#444";
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const base = origin === null || origin === undefined ? 0 : origin;
    for (let t = Math.ceil((box.t0 + base) / step) * step - base; t <= box.t1; t += step) {
      const x = box.x(t);
      ctx.beginPath(); ctx.moveTo(x + 0.5, y); ctx.lineTo(x + 0.5, y + 4); ctx.stroke();
      const label = base ? new Date((base + t) * 1000).toLocaleTimeString() : t.toFixed(step < 1 ? 1 : 0) + " s";
      ctx.fillText(label, x, y + 6);
    }
    ctx.textAlign = "start";
    ctx.fillText("busy", box.plot[1] + 8, y + 6);
  }

  function niceStep(raw) {
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  }

  // Beside each row: its device's busy fraction, a bar of BUSY's width (and its percent when rows are tall).
  function drawBusy(ctx, held, box) {
    const busy = held.utilisation && held.utilisation.devices;
    if (!busy) return;
    const x = box.plot[1] + 6, w = BUSY - 10;
    ctx.textBaseline = "middle";
    for (const [device, i] of held.rows) {
      const f = busy[device];
      if (f === undefined || f === null) continue;
      const y = i * box.row;
      ctx.fillStyle = "#d9dee4";
      ctx.fillRect(x, y + (box.row >= 4 ? 1 : 0), w, Math.max(box.row - 2, 0.6));
      ctx.fillStyle = "#8fa6bf";
      ctx.fillRect(x, y + (box.row >= 4 ? 1 : 0), w * f, Math.max(box.row - 2, 0.6));
      if (box.row >= 10) {
        ctx.fillStyle = "#111";
        ctx.fillText(percent(f), x + 3, y + box.row / 2);
      }
    }
  }

  // The bar under the pointer (offsetX, offsetY in the canvas), or within NEAR px of it: its index; -1 if none.
  function barAt(state, px, py) {
    const box = state.layout, b = state.held.bars;
    if (!box || px < box.plot[0] || px > box.plot[1]) return -1;
    const own = state.drawn.byRow[Math.floor(py / box.row)];
    if (!own) return -1;
    const t = box.t0 + (px - box.plot[0]) / box.scale, slack = NEAR / box.scale;
    let lo = 0, hi = own.length; // the first bar starting after t + slack
    while (lo < hi) { const mid = (lo + hi) >> 1; if (b.start[own[mid]] <= t + slack) lo = mid + 1; else hi = mid; }
    for (let i = lo - 1; i >= 0 && i >= lo - 8; i--) if (b.end[own[i]] >= t - slack) return own[i];
    return -1;
  }

  function describe(held, i) {
    const b = held.bars, key = [...held.keys.keys()][b.job[i]], run = held.keyRun[b.job[i]];
    const job = run ? key.slice(run.length + 1) : key;
    const device = [...held.rows.keys()][b.device[i]];
    const lines = [device, (run ? "run " + run + ", " : "") + "job " + job + ", round " + b.round[i],
      (STATUS[b.status[i]] || b.status[i]) + (b.error[i] ? ": " + b.error[i] : ""),
      "from " + seconds(b.start[i], 1) + " to " + seconds(b.end[i], 1) + " (" + seconds(b.end[i] - b.start[i]) + ")"];
    if (b.wait_s[i] >= 0.005) lines.push("waited " + seconds(b.wait_s[i]));
    if ([b.download_s[i], b.compute_s[i], b.upload_s[i]].some((v) => v !== undefined && v !== null)) {
      lines.push("download " + seconds(b.download_s[i]) + ", compute " + seconds(b.compute_s[i]) + ", upload " + seconds(b.upload_s[i]));
    }
    if (b.samples[i] !== undefined) lines.push(b.samples[i] + " samples");
    if (b.loss[i] !== undefined && b.loss[i] !== null) lines.push("loss " + b.loss[i].toFixed(4));
    return lines.join("\n");
  }

  function listen(canvas, tip, state, redraw) {
    let drag = null;
    canvas.addEventListener("wheel", (event) => {
      event.preventDefault();
      const box = state.layout;
      if (!box) return;
      const at = box.t0 + (event.offsetX - box.plot[0]) / box.scale;
      const factor = Math.exp(event.deltaY * 0.002), full = state.drawn.full;
      const span = Math.min(Math.max((box.t1 - box.t0) * factor, (full[1] - full[0]) / 1e5), (full[1] - full[0]) * 4);
      const left = (at - box.t0) / (box.t1 - box.t0);
      state.view = [at - left * span, at + (1 - left) * span];
      state.follow = false;
      redraw();
    }, { passive: false });
    canvas.addEventListener("mousedown", (event) => { drag = { x: event.clientX, view: state.view.slice() }; });
    window.addEventListener("mouseup", () => { drag = null; });
    canvas.addEventListener("dblclick", () => {
      // The whole history; where something is live and the whole history is shown already, back to following it.
      const whole = state.drawn.full;
      const atWhole = state.view[0] === whole[0] && state.view[1] === whole[1];
      state.follow = !state.held.live || atWhole;
      state.view = state.follow ? followed(state.held, state.drawn) : whole.slice();
      redraw();
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("mousemove", (event) => {
      if (drag && state.layout) {
        const shift = (event.clientX - drag.x) / state.layout.scale;
        state.view = [drag.view[0] - shift, drag.view[1] - shift];
        state.follow = false;
        tip.hidden = true;
        redraw();
        return;
      }
      showTip(tip, state, barAt(state, event.offsetX, event.offsetY), event.offsetX, event.offsetY);
    });
  }

  function showTip(tip, state, i, x, y) {
    if (i < 0) { tip.hidden = true; return; }
    tip.textContent = describe(state.held, i);
    tip.style.left = x + 14 + "px";
    tip.style.top = y + 14 + "px";
    tip.hidden = false;
  }

  // Bar i's middle (its part in view) in viewport coordinates, for a test to hover; null when out of view.
  function centre(canvas, state, i) {
    const box = state.layout, b = state.held.bars;
    if (!box || !(i >= 0 && i < state.held.n) || b.end[i] < box.t0 || b.start[i] > box.t1) return null;
    const from = Math.max(box.x(b.start[i]), box.plot[0]), to = Math.min(box.x(b.end[i]), box.plot[1]);
    const rect = canvas.getBoundingClientRect();
    return { x: rect.left + (from + to) / 2, y: rect.top + (b.device[i] + 0.5) * box.row };
  }

  window.MjflTimeline = { mount, colour, COLOURS };
})();
