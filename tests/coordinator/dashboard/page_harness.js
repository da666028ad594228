// Runs the dashboard's app.js in node against a minimal DOM and the server's real JSON.
// Usage: node page_harness.js APP_JS INDEX_HTML API_JSON; prints a JSON report of what the page drew.
"use strict";
const fs = require("fs");
const path = require("path");
const vm = require("vm");
const [appPath, indexPath, apiPath] = process.argv.slice(2);
const api = JSON.parse(fs.readFileSync(apiPath, "utf8"));

class Node {
  constructor(tag) {
    this.tagName = tag.toUpperCase(); this.children = []; this.parent = null; this.attrs = {};
    this.dataset = {}; this.style = {}; this.listeners = {}; this._text = ""; this.className = "";
    this.hidden = false; this.value = ""; this.checked = false; this.type = "";
    const self = this;
    this.classList = {
      add: (...cs) => { self.className = [self.className, ...cs].join(" ").trim(); },
      toggle: (c, on) => { const set = new Set(self.className.split(" ").filter(Boolean)); on ? set.add(c) : set.delete(c); self.className = [...set].join(" "); },
      contains: (c) => self.className.split(" ").includes(c),
    };
  }
  set textContent(t) { this.children = []; this._text = String(t); }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  setAttribute(k, v) { this.attrs[k] = String(v); if (k.startsWith("data-")) this.dataset[k.slice(5)] = String(v); if (k === "id") this.id = v; }
  getAttribute(k) { return this.attrs[k]; }
  append(...nodes) { for (const n of nodes) { n.parent = this; this.children.push(n); } }
  prepend(...nodes) { for (const n of nodes.reverse()) { n.parent = this; this.children.unshift(n); } }
  replaceChildren(...nodes) { this.children = []; this._text = ""; this.append(...nodes); }
  replaceWith(node) { const i = this.parent.children.indexOf(this); node.parent = this.parent; this.parent.children[i] = node; }
  addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }
  click() { for (const fn of this.listeners.click || []) fn({ stopPropagation() {} }); }
  closest(tag) { let n = this; while (n && n.tagName !== tag.toUpperCase()) n = n.parent; return n; }
  *walk() { for (const c of this.children) { yield c; yield* c.walk(); } }
  // Selectors of the forms app.js uses: "#id", "#id tag", "#id tag tag", with an optional ":checked".
  querySelectorAll(selector) {
    const [first, ...rest] = selector.split(" ");
    let found = first.startsWith("#") ? [...this.walk()].filter((n) => n.id === first.slice(1)) : [this];
    for (const part of rest) {
      const [tag, pseudo] = part.split(":");
      found = found.flatMap((n) => [...n.walk()].filter((m) => m.tagName === tag.toUpperCase() && (pseudo !== "checked" || m.checked)));
    }
    return [...new Set(found)];
  }
  querySelector(selector) { return this.querySelectorAll(selector)[0] ?? null; }
}
class TextNode extends Node { constructor(t) { super("#text"); this._text = t; } }

const body = new Node("body");
function add(parent, tag, id) { const n = new Node(tag); if (id) n.setAttribute("id", id); parent.append(n); return n; }
function table(id, keys) {
  const t = add(body, "table", id); const head = add(add(t, "thead"), "tr");
  for (const key of keys) { const th = add(head, "th"); if (key) th.setAttribute("data-key", key); }
  add(t, "tbody");
}
for (const id of ["status", "compare", "run-section", "run-title", "jobs", "device-filter", "device-count", "device-log", "device-log-title",
  "device-log-source", "device-log-lines", "device-log-close", "event-kind", "event-count", "round-detail", "round-title", "round-close",
  "timeline", "run-standing"]) add(body, "div", id);
for (const id of ["provenance", "provenance-body"]) add(body, "div", id);
table("runs", []);
table("events", []);
table("round-devices", []);
table("devices", [...fs.readFileSync(indexPath, "utf8").matchAll(/data-key="(\w+)"/g)].map((m) => m[1]));
table("choices", []);

// The server marks the page of a dashboard with a live run (index.html's <body data-live>): here, the API has one.
body.dataset.live = api["api/live"] === undefined ? "no" : "yes";
const document = {
  body,
  getElementById: (id) => body.querySelector("#" + id),
  querySelector: (s) => body.querySelector(s),
  querySelectorAll: (s) => body.querySelectorAll(s),
  createElement: (tag) => new Node(tag),
  createElementNS: (ns, tag) => new Node(tag),
  createTextNode: (t) => new TextNode(t),
  listeners: {},
  addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); },
};
const fetched = [];
async function fetch(path) {
  fetched.push(path);
  const data = api[decodeURIComponent(path)];
  return { ok: data !== undefined, status: data === undefined ? 404 : 200, json: async () => data, text: async () => "" };
}
// The live stream: the page's EventSource, driven by the harness with api["live pushes"].
const sources = [];
class EventSource {
  constructor(url) { this.url = url; this.listeners = {}; sources.push(this); }
  addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }
  push(view) { for (const fn of this.listeners.run || []) fn({ data: JSON.stringify(view) }); }
}
// The timeline component (timeline.js draws on a canvas, which this DOM has not): what the page gave it to draw.
const timelines = [];
const drawn = (how) => (data) => timelines.push({ how, bars: data.bars.round.length, jobs: data.jobs, total: data.total });
const MjflTimeline = { colour: (i) => "#" + String(i).padStart(6, "0"), mount: () => ({ update: drawn("update"), append: drawn("append") }) };
const context = vm.createContext({ window: { MjflTimeline }, EventSource, document, fetch, location: { search: "?token=t0k" }, URLSearchParams, performance, console, Promise, Map, Set, Math, Number, String, Object, Error });
// dom.js (what the page shares with the lab's page) loads first, beside app.js, as index.html loads it.
vm.runInContext(fs.readFileSync(path.join(path.dirname(appPath), "dom.js"), "utf8"), context);
vm.runInContext(fs.readFileSync(appPath, "utf8"), context);

(async () => {
  for (const fn of document.listeners.DOMContentLoaded) fn();
  await new Promise((r) => setTimeout(r, 10));
  const report = { fetched };
  const runs = body.querySelectorAll("#runs tbody tr").filter((r) => r.dataset.id !== "live");
  report.runs = runs.length;
  const started = performance.now();
  await vm.runInContext(`openRun(${JSON.stringify(runs[0].dataset.id)})`, context);
  report.open_ms = performance.now() - started;
  report.title = body.querySelector("#run-title").textContent;
  report.devices = body.querySelectorAll("#devices tbody tr").length;
  report.provenance_hidden = body.querySelector("#provenance").hidden;
  report.provenance_text = body.querySelector("#provenance-body").textContent;
  report.provenance_rows = body.querySelectorAll("#provenance-body tbody").map((t) => t.children.length);
  report.first_device = body.querySelector("#devices tbody tr").children[0].textContent;
  report.state_column_hidden = body.querySelectorAll("#devices th").find((th) => th.dataset.key === "state").hidden;
  const paths = (measure) => [...body.querySelector("#jobs").walk()].filter((n) => n.tagName === "SVG" && n.classList.contains(measure))
    .flatMap((svg) => [...svg.walk()].filter((n) => n.tagName === "PATH").map((n) => n.attrs.d));
  report.paths = paths("accuracy");
  report.loss_paths = paths("loss");
  report.target_lines = [...body.querySelector("#jobs").walk()].filter((n) => n.attrs.class === "target").length;
  body.querySelectorAll("#devices th").find((th) => th.dataset.key === "failed").click();
  body.querySelectorAll("#devices th").find((th) => th.dataset.key === "failed").click(); // descending
  report.most_failed = body.querySelector("#devices tbody tr").children[0].textContent;
  body.querySelector("#device-filter").value = "d1";
  for (const fn of body.querySelector("#device-filter").listeners.input) fn();
  report.filtered = body.querySelector("#device-count").textContent;
  report.choices = body.querySelectorAll("#choices tbody tr").length;
  report.events = body.querySelectorAll("#events tbody tr").length;
  body.querySelector("#event-kind").value = "rejected";
  for (const fn of body.querySelector("#event-kind").listeners.change) fn();
  report.rejected_events = body.querySelectorAll("#events tbody tr").map((r) => r.children[2].textContent);
  body.querySelectorAll("#choices tbody tr")[1].click();
  await new Promise((r) => setTimeout(r, 10));
  report.round_fetched = fetched.at(-1);
  report.round_title = body.querySelector("#round-title").textContent;
  report.round_answers = body.querySelectorAll("#round-devices tbody tr").slice(0, 3).map((r) => r.children[1].textContent);
  body.querySelector("#devices tbody tr").click();
  await new Promise((r) => setTimeout(r, 10));
  report.log_fetched = fetched.at(-1);
  report.log_title = body.querySelector("#device-log-title").textContent;
  report.log_source = body.querySelector("#device-log-source").textContent;
  report.log_lines = body.querySelector("#device-log-lines").textContent;
  for (const box of body.querySelectorAll("#runs tbody input")) box.checked = true;
  await vm.runInContext("compare()", context);
  report.compared_paths = [...body.querySelector("#compare").walk()].filter((n) => n.tagName === "PATH").length;
  report.status = body.querySelector("#status").textContent;
  if (sources.length) {
    const states = () => Object.fromEntries(body.querySelectorAll("#devices tbody tr").map((r) => [r.children[0].textContent, r.children.at(-1).textContent]));
    report.live_source = sources[0].url;
    report.live_row = body.querySelectorAll("#runs tbody tr")[0].dataset.id;
    body.querySelector("#device-filter").value = ""; // the filter the first part typed
    await vm.runInContext('openRun("live")', context);
    report.live_title = body.querySelector("#run-title").textContent;
    report.live_states = states();
    report.live_state_column_hidden = body.querySelectorAll("#devices th").find((th) => th.dataset.key === "state").hidden;
    for (const view of api["live pushes"]) sources[0].push(view);
    report.pushed_states = states();
    report.pushed_paths = paths("accuracy");
    report.live_row_text = body.querySelectorAll("#runs tbody tr")[0].textContent;
    await new Promise((r) => setTimeout(r, 10));
  }
  report.timelines = timelines;
  console.log(JSON.stringify(report));
})().catch((error) => { console.error(error.stack); process.exit(1); });
