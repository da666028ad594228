// The device timeline: one row per device, time across, each device round a bar coloured by its job, drawn on a <canvas>.
// Independent of the page around it (app.js, the lab page): one global, window.MjflTimeline.
//
//   const timeline = MjflTimeline.mount(container, { details });  // its summary, legend, canvas and tooltip
//   timeline.update(data);                           // draws `data`, in place of what it drew
//   timeline.append(data);                           // adds `data`'s bars to what it drew (a live run's new ones)
//
// details(bar), optional: a promise of what hovering `bar` ({device, run, job, round}) shows beyond where it is,
// its device's entry of its round (state.round_devices: samples, wait_s, time_s, download_s, compute_s, upload_s,
// mean_loss, error, energy), or null; asked once per round and device, when the bar is first hovered.
//
// data (dashboard/timeline.py builds it; /api/runs/{id}/timeline, /api/live/timeline and /lab/timeline serve it):
//   { devices: [id, ...],            // the rows, top to bottom; a bar's `device` is an index here
//     jobs: [key, ...],              // a bar's `job` is an index here; its key gives its colour
//     runs?: [run, ...], job_runs?: [i, ...],  // the lab's: each job's run (an index into runs), its colour's hue
//     statuses: ["ok", "failed", "rejected"],                    // a bar's status: an index here
//     bars: { device: [i], job: [i], round: [n], start_s: [s], end_s: [s], status: [i] },  // one entry a bar
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
  const STATUS_NAMES = ["ok", "failed", "rejected"];  // a bar's status: its index here (dashboard/timeline.py)
  const STATUS = { ok: "used", failed: "no answer", rejected: "update refused" };

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

  // What the component holds: the bars as columns, in the order they came, and the names their indices stand for
  // (rows, job keys and their runs; statuses as STATUS_NAMES).
  function empty() {
    const bars = { device: [], job: [], round: [], start: [], end: [], status: [] };
    return { rows: new Map(), keys: new Map(), keyRun: [], runs: new Map(), bars, n: 0, origin: null, live: null,
      utilisation: null };
  }

  // Add `data`'s bars to `held`, its indices turned into held's (a part's devices and jobs are its own).
  function add(held, data) {
    const part = data.bars || {}, count = (part.round || []).length, b = held.bars;
    const rows = (data.devices || []).map((d) => { if (!held.rows.has(d)) held.rows.set(d, held.rows.size); return held.rows.get(d); });
    const keys = (data.jobs || []).map((key, j) => {
      if (!held.keys.has(key)) {
        held.keys.set(key, held.keys.size);
        const run = data.runs && data.job_runs ? data.runs[data.job_runs[j]] : null;
        if (run !== null && !held.runs.has(run)) held.runs.set(run, held.runs.size);
        held.keyRun.push(run);
      }
      return held.keys.get(key);
    });
    const statuses = (data.statuses || STATUS_NAMES).map((name) => Math.max(STATUS_NAMES.indexOf(name), 0));
    const mapped = (column, names) => { const out = new Array(count); for (let i = 0; i < count; i++) out[i] = names[column[i]]; return out; };
    const joined = (name, column) => { b[name] = b[name].length ? b[name].concat(column) : column; };
    joined("device", mapped(part.device, rows));
    joined("job", mapped(part.job, keys));
    joined("status", mapped(part.status, statuses));
    joined("round", part.round || []);
    joined("start", part.start_s || []);
    joined("end", part.end_s || []);
    held.n += count;
    if (data.origin !== undefined) held.origin = data.origin;
    if (data.live !== undefined) held.live = data.live;
    if (data.utilisation !== undefined) held.utilisation = data.utilisation;
  }

  // The bars as drawn: grouped by colour and status (job index x 4 + status), each row's by start (for hovering),
  // the span of them all.
  function index(held) {
    const b = held.bars, groups = new Map(), perKey = new Array(held.keys.size).fill(0), byRow = [];
    let first = Infinity, last = -Infinity;
    for (let i = 0; i < held.n; i++) {
      const group = b.job[i] * 4 + b.status[i];
      let own = groups.get(group);
      if (own === undefined) groups.set(group, own = []);
      own.push(i);
      perKey[b.job[i]]++;
      (byRow[b.device[i]] = byRow[b.device[i]] || []).push(i);
      if (b.start[i] < first) first = b.start[i];
      if (b.end[i] > last) last = b.end[i];
    }
    const start = b.start;
    byRow.forEach((own) => own.sort((x, y) => start[x] - start[y]));
    if (!(last > first)) { first = Number.isFinite(first) ? first : 0; last = first + 1; }
    const names = [...held.keys.keys()];
    const counts = Object.fromEntries(names.map((name, k) => [name, perKey[k]]));
    return { groups, counts, byRow, colours: names.map((_, k) => keyColour(held, k)), full: [first, last] };
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

  function mount(container, options = {}) {
    const summary = el("p", "timeline-summary");
    const legend = el("div", "timeline-legend");
    const wrap = el("div", "timeline-wrap");
    const canvas = el("canvas", "timeline-canvas");
    const tip = el("div", "timeline-tip");
    tip.hidden = true;
    wrap.append(canvas, tip);
    container.replaceChildren(summary, legend, wrap);
    const state = { held: empty(), drawn: index(empty()), view: null, follow: true, layout: null, pending: 0,
      details: options.details || null, told: new Map(), hovered: -1 };
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
      update(data) {
        const started = performance.now();
        state.held = empty();
        state.told.clear();
        add(state.held, data);
        shown(started);
      },
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
      const status = STATUS_NAMES[group % 4], fill = state.drawn.colours[Math.floor(group / 4)];
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

  // Bar i as the details hook is asked about it: its device, run, job and round.
  function barOf(held, i) {
    const b = held.bars, key = [...held.keys.keys()][b.job[i]], run = held.keyRun[b.job[i]];
    return { device: [...held.rows.keys()][b.device[i]], run, job: run ? key.slice(run.length + 1) : key, round: b.round[i] };
  }

  // What hovering bar i shows: where it is and how it ended, then what its round told of it (`told`, once asked).
  function describe(held, i, told) {
    const b = held.bars, bar = barOf(held, i);
    const lines = [bar.device, (bar.run ? "run " + bar.run + ", " : "") + "job " + bar.job + ", round " + bar.round,
      STATUS[STATUS_NAMES[b.status[i]]] + (told && told.error ? ": " + told.error : ""),
      "from " + seconds(b.start[i], 1) + " to " + seconds(b.end[i], 1) + " (" + seconds(b.end[i] - b.start[i]) + ")"];
    if (!told) return lines.join("\n");
    if (told.wait_s >= 0.005) lines.push("waited " + seconds(told.wait_s));
    if ([told.download_s, told.compute_s, told.upload_s].some((v) => v !== undefined && v !== null)) {
      lines.push("download " + seconds(told.download_s) + ", compute " + seconds(told.compute_s) + ", upload " + seconds(told.upload_s));
    }
    if (told.samples !== undefined && told.samples !== null) lines.push(told.samples + " samples");
    if (told.mean_loss !== undefined && told.mean_loss !== null) lines.push("loss " + told.mean_loss.toFixed(4));
    if (told.energy) lines.push("energy " + told.energy);
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

  // The tip of bar i at (x, y); its round's details asked for (once a round and device), and shown if it is still
  // the bar hovered when they come.
  function showTip(tip, state, i, x, y) {
    state.hovered = i;
    if (i < 0) { tip.hidden = true; return; }
    const bar = barOf(state.held, i), key = [bar.run, bar.job, bar.round, bar.device].join("\u0000");
    tip.textContent = describe(state.held, i, state.told.get(key));
    tip.style.left = x + 14 + "px";
    tip.style.top = y + 14 + "px";
    tip.hidden = false;
    if (!state.details || state.told.has(key)) return;
    state.told.set(key, null);
    state.details(bar).then((told) => {
      state.told.set(key, told);
      if (state.hovered === i && told) tip.textContent = describe(state.held, i, told);
    }).catch(() => { state.told.delete(key); });
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
