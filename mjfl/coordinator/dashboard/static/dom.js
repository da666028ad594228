// What both pages of the dashboard share (the run page's app.js, the lab page's lab.js): the token the address
// carries, the JSON API with it, and the DOM helpers. Every string goes in as text, never as HTML.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token");

async function api(path) {
  const headers = TOKEN ? { Authorization: "Bearer " + TOKEN } : {};
  const response = await fetch(path, { headers });
  if (!response.ok) throw new Error(path + ": " + response.status + " " + (await response.text()));
  return response.json();
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fmt(value, digits = 1) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  return String(value);
}
