// The device timeline: one row per device, time across, each device round a bar coloured by its job, drawn on a <canvas>.
// Independent of the page around it (app.js, the lab page): one global, window.MjflTimeline.
//
//   const timeline = MjflTimeline.mount(container);  // builds its summary, legend, canvas and tooltip in `container`
//   timeline.update(data);                           // draws `data` (again: a live run calls it as bars come)
//
// data (state.py's `timeline` builds it from a run's records; /api/runs/{id}/timeline serves it):
//   { devices: [id, ...],         // one row each, top to bottom; a bar's device missing here gets a row below
//     jobs: [key, ...],           // a bar's colour: the index of its key here (COLOURS, the page's job colours)
//     bars: [{ device, job, round, start_s, end_s,   // times in seconds from one origin (the run's clock)
//              status,            // "ok" (filled), "failed" (hatched), "rejected": its update refused (outlined)
//              run?,              // optional: the bar's key is then `${run}/${job}` (the lab page: all runs at once)
//              samples?, wait_s?, duration_s?, download_s?, compute_s?, upload_s?, loss?, error? }, ...],  // hover
//     utilisation?: { span_s, fleet, devices: {id: fraction} } }  // busy fractions (results/utilisation.py)
//
// Wheel zooms in time around the pointer, a drag pans, a double-click shows the whole run again; hovering a bar
// shows its round's details. A live page calls update() with more bars: an unzoomed view follows them.
// Test hooks: container.dataset.bars (bars drawn from), .jobs (JSON: bars per key), .renderMs (the last update's or
// redraw's time, indexing included);
// container.mjflTimeline.centre(i): the viewport coordinates of bar i's middle, to hover it (scrolled into view first).
"use strict";

(function () {
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const ROW_MAX = 16;         // px: a row's height when the devices fit
  const PLOT_MAX = 560;       // px: the rows' height at most (1,000 devices share it)
  const AXIS = 22, LABELS = 120, BUSY = 76, NEAR = 3;  // px: time axis, device ids, busy column, hover slack
  const STATUS = { ok: "used", failed: "no answer", rejected: "update refused" };

  function keyOf(bar) { return bar.run === undefined || bar.run === null ? bar.job : bar.run + "/" + bar.job; }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function seconds(value, digits = 2) { return value === null || value === undefined ? "—" : value.toFixed(digits) + " s"; }
  function percent(value) { return value === null || value === undefined ? "—" : Math.round(value * 100) + "%"; }

  // The data as drawn: rows, bars grouped by colour and status, each row's bars by start (for hovering).
  function index(data) {
    const rows = new Map();
    (data.devices || []).forEach((d) => rows.set(d, rows.size));
    const keys = new Map();
    (data.jobs || []).forEach((k) => keys.set(k, keys.size));
    const bars = data.bars || [];
    const groups = new Map(), counts = {}, byRow = [];
    let first = Infinity, last = -Infinity;
    for (const bar of bars) {
      if (!rows.has(bar.device)) rows.set(bar.device, rows.size);
      const key = keyOf(bar);
      if (!keys.has(key)) keys.set(key, keys.size);
      const group = keys.get(key) + ":" + (STATUS[bar.status] ? bar.status : "ok");
      if (!groups.has(group)) groups.set(group, []);
      groups.get(group).push(bar);
      counts[key] = (counts[key] || 0) + 1;
      const row = rows.get(bar.device);
      (byRow[row] = byRow[row] || []).push(bar);
      first = Math.min(first, bar.start_s);
      last = Math.max(last, bar.end_s);
    }
    byRow.forEach((own) => own.sort((a, b) => a.start_s - b.start_s));
    if (!(last > first)) { first = Number.isFinite(first) ? first : 0; last = first + 1; }
    return { rows, keys, groups, counts, byRow, full: [first, last], bars, utilisation: data.utilisation || null };
  }

  function colour(i) { return COLOURS[i % COLOURS.length]; }

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
    const state = { data: index({}), view: null, zoomed: false, layout: null, pending: 0 };
    const redraw = () => {
      if (state.pending) return;
      state.pending = requestAnimationFrame(() => { state.pending = 0; draw(canvas, state, container); });
    };
    listen(canvas, tip, state, redraw);
    const handle = {
      update(data) {
        const started = performance.now();
        state.data = index(data);
        if (!state.zoomed || state.view === null) state.view = state.data.full.slice();
        drawLegend(legend, state.data);
        drawSummary(summary, state.data);
        container.dataset.bars = String(state.data.bars.length);
        container.dataset.jobs = JSON.stringify(state.data.counts);
        draw(canvas, state, container, started);
      },
      centre(i) { return centre(canvas, state, state.data.bars[i]); },
    };
    container.mjflTimeline = handle;
    window.addEventListener("resize", redraw);
    return handle;
  }

  function drawLegend(box, data) {
    const items = [...data.keys.keys()].map((key, i) => {
      const item = el("span", null, key);
      const swatch = el("i");
      swatch.style.background = colour(i);
      item.prepend(swatch);
      return item;
    });
    items.push(el("span", "timeline-failed", "failed: hatched"), el("span", "timeline-rejected", "update refused: outlined"),
      el("span", "hint", "wheel: zoom · drag: pan · double-click: whole run"));
    box.replaceChildren(...items);
  }

  function drawSummary(box, data) {
    const busy = data.utilisation;
    if (!busy || busy.fleet === null || busy.fleet === undefined) {
      box.textContent = data.bars.length + " device rounds";
      return;
    }
    const ranked = Object.entries(busy.devices).filter(([, f]) => f !== null).sort((a, b) => a[1] - b[1]);
    const ends = ranked.length ? "; least busy " + ranked[0][0] + " " + percent(ranked[0][1]) + ", most busy "
      + ranked[ranked.length - 1][0] + " " + percent(ranked[ranked.length - 1][1]) : "";
    box.textContent = data.bars.length + " device rounds; the fleet busy " + percent(busy.fleet) + " of "
      + seconds(busy.span_s, 1) + " (" + ranked.length + " devices)" + ends;
  }

  // Where things go: the canvas's size, each row's height, time <-> x.
  function layout(canvas, state) {
    const n = Math.max(state.data.rows.size, 1);
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
    drawLanes(ctx, state.data, box);
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.plot[0], 0, box.plot[1] - box.plot[0], box.height - AXIS);
    ctx.clip();
    drawBars(ctx, state.data, box);
    ctx.restore();
    drawAxis(ctx, box);
    drawBusy(ctx, state.data, box);
    container.dataset.renderMs = (performance.now() - started).toFixed(1);
  }

  // Each row's lane (alternate shading: the gaps between bars are the device's idle time) and its device id.
  function drawLanes(ctx, data, box) {
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (const [device, i] of data.rows) {
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
  function drawBars(ctx, data, box) {
    const pad = box.row >= 4 ? 1 : 0, h = Math.max(box.row - 2 * pad, 0.6);
    for (const [group, bars] of data.groups) {
      const [k, status] = group.split(":");
      const fill = colour(Number(k));
      ctx.fillStyle = status === "failed" ? hatch(ctx, fill) : status === "rejected" ? "#fff" : fill;
      ctx.strokeStyle = fill;
      ctx.lineWidth = 1.5;
      for (const bar of bars) {
        if (bar.end_s < box.t0 || bar.start_s > box.t1) continue;
        const x = box.x(bar.start_s), w = Math.max(box.x(bar.end_s) - x, 1);
        const y = data.rows.get(bar.device) * box.row + pad;
        ctx.fillRect(x, y, w, h);
        if (status !== "ok" && h >= 3) ctx.strokeRect(x + 0.75, y + 0.75, Math.max(w - 1.5, 0), h - 1.5);
      }
    }
  }

  function drawAxis(ctx, box) {
    const y = box.height - AXIS;
    ctx.strokeStyle = "#888";
    ctx.beginPath(); ctx.moveTo(box.plot[0], y + 0.5); ctx.lineTo(box.plot[1], y + 0.5); ctx.stroke();
    const span = box.t1 - box.t0, step = niceStep(span / 8);
    ctx.fillStyle = "#444";
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let t = Math.ceil(box.t0 / step) * step; t <= box.t1; t += step) {
      const x = box.x(t);
      ctx.beginPath(); ctx.moveTo(x + 0.5, y); ctx.lineTo(x + 0.5, y + 4); ctx.stroke();
      ctx.fillText(t.toFixed(step < 1 ? 1 : 0) + " s", x, y + 6);
    }
    ctx.textAlign = "start";
    ctx.fillText("busy", box.plot[1] + 8, y + 6);
  }

  function niceStep(raw) {
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  }

  // Beside each row: its device's busy fraction over the run, a bar of BUSY's width (and its percent when rows are tall).
  function drawBusy(ctx, data, box) {
    const busy = data.utilisation && data.utilisation.devices;
    if (!busy) return;
    const x = box.plot[1] + 6, w = BUSY - 10;
    ctx.textBaseline = "middle";
    for (const [device, i] of data.rows) {
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

  // The bar under the pointer (offsetX, offsetY in the canvas), or within NEAR px of it; null if none.
  function barAt(state, px, py) {
    const box = state.layout;
    if (!box || px < box.plot[0] || px > box.plot[1]) return null;
    const own = state.data.byRow[Math.floor(py / box.row)];
    if (!own) return null;
    const t = box.t0 + (px - box.plot[0]) / box.scale, slack = NEAR / box.scale;
    let lo = 0, hi = own.length; // the first bar starting after t + slack
    while (lo < hi) { const mid = (lo + hi) >> 1; if (own[mid].start_s <= t + slack) lo = mid + 1; else hi = mid; }
    for (let i = lo - 1; i >= 0 && i >= lo - 8; i--) if (own[i].end_s >= t - slack) return own[i];
    return null;
  }

  function describe(bar) {
    const lines = [bar.device, (bar.run ? "run " + bar.run + ", " : "") + "job " + bar.job + ", round " + bar.round,
      (STATUS[bar.status] || bar.status) + (bar.error ? ": " + bar.error : ""),
      "from " + seconds(bar.start_s, 1) + " to " + seconds(bar.end_s, 1) + " (" + seconds(bar.end_s - bar.start_s) + ")"];
    if (bar.wait_s >= 0.005) lines.push("waited " + seconds(bar.wait_s));
    if ([bar.download_s, bar.compute_s, bar.upload_s].some((v) => v !== undefined && v !== null)) {
      lines.push("download " + seconds(bar.download_s) + ", compute " + seconds(bar.compute_s) + ", upload " + seconds(bar.upload_s));
    }
    if (bar.samples !== undefined) lines.push(bar.samples + " samples");
    if (bar.loss !== undefined && bar.loss !== null) lines.push("loss " + bar.loss.toFixed(4));
    return lines.join("\n");
  }

  function listen(canvas, tip, state, redraw) {
    let drag = null;
    canvas.addEventListener("wheel", (event) => {
      event.preventDefault();
      const box = state.layout;
      if (!box) return;
      const at = box.t0 + (event.offsetX - box.plot[0]) / box.scale;
      const factor = Math.exp(event.deltaY * 0.002), full = state.data.full;
      const span = Math.min(Math.max((box.t1 - box.t0) * factor, (full[1] - full[0]) / 1e5), (full[1] - full[0]) * 4);
      const left = (at - box.t0) / (box.t1 - box.t0);
      state.view = [at - left * span, at + (1 - left) * span];
      state.zoomed = true;
      redraw();
    }, { passive: false });
    canvas.addEventListener("mousedown", (event) => { drag = { x: event.clientX, view: state.view.slice() }; });
    window.addEventListener("mouseup", () => { drag = null; });
    canvas.addEventListener("dblclick", () => { state.view = state.data.full.slice(); state.zoomed = false; redraw(); });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("mousemove", (event) => {
      if (drag && state.layout) {
        const shift = (event.clientX - drag.x) / state.layout.scale;
        state.view = [drag.view[0] - shift, drag.view[1] - shift];
        state.zoomed = true;
        tip.hidden = true;
        redraw();
        return;
      }
      showTip(tip, barAt(state, event.offsetX, event.offsetY), event.offsetX, event.offsetY);
    });
  }

  function showTip(tip, bar, x, y) {
    if (bar === null) { tip.hidden = true; return; }
    tip.textContent = describe(bar);
    tip.style.left = x + 14 + "px";
    tip.style.top = y + 14 + "px";
    tip.hidden = false;
  }

  // Bar `bar`'s middle (its part in view) in viewport coordinates, for a test to hover; null when out of view.
  function centre(canvas, state, bar) {
    const box = state.layout;
    if (!box || !bar || bar.end_s < box.t0 || bar.start_s > box.t1) return null;
    const from = Math.max(box.x(bar.start_s), box.plot[0]), to = Math.min(box.x(bar.end_s), box.plot[1]);
    const rect = canvas.getBoundingClientRect();
    return { x: rect.left + (from + to) / 2, y: rect.top + (state.data.rows.get(bar.device) + 0.5) * box.row };
  }

  window.MjflTimeline = { mount, COLOURS };
})();
