"""The page ``teamlead view`` serves: its HTML, style and script, in one string.

The page runs only this script (nonce'd, under the board's Content-Security-Policy): no
library, no CDN, no build step. It builds everything with ``textContent`` and
``setAttribute``, never markup from data: the runs' table from the ``runs`` events, and
the picked run's agent tree, queue, approvals and limits chart from its ``detail`` events.
The board fills in ``{nonce}`` and ``{mode}`` (``live``, or ``log``: a run read from its
NDJSON, no buttons).
"""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>teamlead runs</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style nonce="{nonce}">
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid #ddd; }
td.command { font-family: monospace; word-break: break-all; }
#said { margin: .8em 0; min-height: 1.2em; }
#said.refused, .trouble { color: #a00; }
button { margin-right: .3em; }
ul.tree, ul.tree ul { list-style: none; padding-left: 1.4em; margin: 0; }
ul.tree { padding-left: 0; }
.node { padding: .15em 0; font-variant-numeric: tabular-nums; }
.node span { margin-right: .8em; }
.node .label { font-weight: 600; word-break: break-all; }
.node .kind { color: #666; font-size: 90%; }
.node .state { padding: 0 .4em; border-radius: .3em; background: #eee; }
li[data-state="running"] > .node .state { background: #d8ecff; }
li[data-state="done"] > .node .state, li[data-state="cached"] > .node .state
  { background: #dff5df; }
li[data-state="failed"] > .node .state, li[data-state="lost"] > .node .state,
li[data-state="timeout"] > .node .state, li[data-state="stopped"] > .node .state
  { background: #fbdcdc; }
li[data-state="queued"] > .node .state, li[data-state="unfinished"] > .node .state
  { background: #fff2c6; }
#live.unfinished, #detail-status.unfinished { color: #8a5a00; font-weight: 600; }
.node .tool { font-family: monospace; }
#chart svg { border: 1px solid #ddd; background: #fcfcfc; }
section h3 { margin: 1em 0 .3em; font-size: 105%; }
pre.text { white-space: pre-wrap; word-break: break-word; background: #f6f6f6;
  padding: .5em; margin: .2em 0; max-height: 30em; overflow: auto; }
li details { margin: .1em 0 .3em 1em; }
#empty { color: #555; }
</style></head>
<body data-mode="{mode}">
<h1>teamlead runs</h1>
<p id="live">connecting...</p>
<p id="said"></p>
<table id="runs-table"><thead><tr><th>run</th><th>session</th><th>pid</th><th>status</th>
<th>agents r/q/d/f</th><th>tokens</th><th>requests</th><th>cap</th><th>held</th>
<th>command</th><th></th></tr></thead><tbody id="runs"></tbody></table>
<p id="empty" hidden>No runs yet. Start one with <code>teamlead ask "your task"</code>, or
try <code>teamlead demo</code> offline: it shows here while it runs, and stays listed from
the run history once it has finished.</p>
<section id="detail" hidden>
<h2 id="detail-title"></h2>
<p id="detail-status"></p>
<div id="past" hidden>
<h3>Prompt</h3>
<pre id="detail-prompt" class="text"></pre>
<h3>Answer</h3>
<pre id="detail-answer" class="text"></pre>
<h3>Reasons</h3>
<ul id="detail-reasons"></ul>
</div>
<h3>Agents</h3>
<ul id="tree" class="tree"></ul>
<p id="omitted"></p>
<div id="now">
<h3>Queue and held requests</h3>
<ul id="queue"></ul>
<h3>Waiting for approval</h3>
<ul id="approvals"></ul>
<h3>Governor limit per model</h3>
<div id="chart"></div>
</div>
</section>
<script nonce="{nonce}">
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
history.replaceState(null, "", "/");
const mode = document.body.dataset.mode;
const body = document.getElementById("runs");
const said = document.getElementById("said");
const live = document.getElementById("live");
let picked = null;
let detailEvents = null;
function text(value) { return value === null || value === undefined ? "-" : String(value); }
function el(tag, kind, parent) {
  const e = document.createElement(tag);
  if (kind) e.className = kind;
  if (parent) parent.appendChild(e);
  return e;
}
function span(parent, value, kind) { el("span", kind, parent).textContent = text(value); }
function cell(row, value, kind) { el("td", kind, row).textContent = text(value); }
function num(value) {
  if (value === null || value === undefined || value === "") return null;
  const n = Number(value);
  return Number.isFinite(n) ? n : null;
}
async function press(run, op) {
  said.textContent = "...";
  said.className = "";
  try {
    const answer = await fetch("/act", {
      method: "POST",
      headers: {"content-type": "application/json", "x-teamlead-token": token},
      body: JSON.stringify({run: run, op: op}),
    });
    const data = await answer.json();
    said.textContent = text(data.message);
    said.className = data.ok ? "" : "refused";
  } catch (error) {
    said.textContent = "the page could not reach teamlead view";
    said.className = "refused";
  }
}
function button(row, label, op, action) {
  const b = el("button", "", row);
  b.textContent = label;
  b.dataset.op = op;
  b.addEventListener("click", action);
}
function show(runs) {
  body.replaceChildren();
  for (const r of runs) {
    const row = el("tr", "", body);
    row.dataset.run = r.run;
    const a = r.agents || {};
    cell(row, r.run); cell(row, (r.session_id || "-").slice(0, 8)); cell(row, r.pid);
    cell(row, r.status, "status");
    cell(row, [a.running, a.queued, a.done, a.failed].map(text).join("/"));
    cell(row, r.tokens); cell(row, r.requests); cell(row, r.cap); cell(row, r.held);
    cell(row, r.command, "command");
    const actions = el("td", "", row);
    button(actions, "Tree", "detail", () => pick(String(r.run)));
    if (r.finished) continue;  // a run of the history: nothing to steer
    if (r.status === "paused") button(actions, "Unpause", "unpause", () => press(r.run, "unpause"));
    else button(actions, "Pause", "pause", () => press(r.run, "pause"));
    button(actions, "Stop", "stop", () => press(r.run, "stop"));
    button(actions, "Stop now", "stop_now", () => press(r.run, "stop_now"));
  }
  const running = runs.filter((r) => !r.finished).length;
  live.textContent = running + " running, " + (runs.length - running) + " finished";
  document.getElementById("empty").hidden = runs.length > 0;
  if (picked === null && runs.length === 1) pick(String(runs[0].run));
}
function duration(seconds) {
  const s = num(seconds);
  if (s === null) return "-";
  return s < 90 ? s.toFixed(1) + " s" : (s / 60).toFixed(1) + " min";
}
function node(n) {
  const li = el("li");
  li.dataset.agent = text(n.id);
  li.dataset.kind = text(n.kind);
  li.dataset.state = text(n.state);
  const line = el("div", "node", li);
  span(line, n.label, "label");
  span(line, n.kind, "kind");
  span(line, n.state, "state");
  span(line, text(n.tokens) + " tok", "tokens");
  span(line, text(n.requests) + " req", "requests");
  span(line, n.last_tool, "tool");
  span(line, duration(n.duration_s), "duration");
  if (n.prompt || n.result || n.reason) {  // a finished run's agent: what it was asked, said
    const more = el("details", "", li);
    el("summary", "", more).textContent = "prompt and result";
    for (const kind of ["prompt", "result", "reason"]) {
      if (!n[kind]) continue;
      el("div", "", more).textContent = kind;
      el("pre", "text " + kind, more).textContent = text(n[kind]);
    }
  }
  const children = Array.isArray(n.children) ? n.children : [];
  if (children.length) {
    const ul = el("ul", "", li);
    for (const child of children) ul.appendChild(node(child));
  }
  return li;
}
function item(list, value) { el("li", "", list).textContent = value; }
const NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"];
function svg(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  parent.appendChild(e);
  return e;
}
function chart(d) {
  const box = document.getElementById("chart");
  box.replaceChildren();
  const series = (Array.isArray(d.limits) ? d.limits : []).map((s) => ({
    key: text(s.key),
    points: (Array.isArray(s.points) ? s.points : [])
      .map((p) => [num(p[0]), num(p[1]), num(p[2]), text(p[3])])
      .filter((p) => p[0] !== null && p[1] !== null),
  })).filter((s) => s.points.length);
  if (!series.length) {
    el("p", "", box).textContent = "no limit change yet: the governor kept its ceiling";
    return;
  }
  const times = series.flatMap((s) => s.points.map((p) => p[0]));
  let t0 = Math.min(...times);
  if (num(d.started) !== null) t0 = Math.min(t0, num(d.started));
  let t1 = Math.max(...times, num(d.now) === null ? -Infinity : num(d.now));
  if (!(t1 > t0)) t1 = t0 + 1;
  const top = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const W = 640, H = 220, L = 44, R = 12, T = 12, B = 34;
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
  const y = (v) => H - B - (H - T - B) * v / top;
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img"}, box);
  svg("title", {}, s).textContent = "the governor's limit per model over time";
  svg("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#888"}, s);
  svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888"}, s);
  for (const v of [0, Math.round(top / 2), top]) {
    const label = svg("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11}, s);
    label.textContent = String(v);
  }
  const end = svg("text", {x: W - R, y: H - 12, "text-anchor": "end", "font-size": 11}, s);
  end.textContent = (t1 - t0).toFixed(0) + " s";
  svg("text", {x: L, y: H - 12, "font-size": 11}, s).textContent = "0 s";
  series.forEach((one, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const g = svg("g", {"data-key": one.key}, s);
    const path = [`${x(t0)},${y(one.points[0][1])}`];  // its first value, from the start
    let last = null;
    for (const [t, v] of one.points) {
      if (last !== null) path.push(`${x(t)},${y(last)}`);
      path.push(`${x(t)},${y(v)}`);
      last = v;
    }
    path.push(`${x(t1)},${y(last)}`);
    svg("polyline", {points: path.join(" "), fill: "none", stroke: colour, "stroke-width": 2}, g);
    for (const [t, v, cap, reason] of one.points) {
      const dot = svg("circle", {cx: x(t), cy: y(v), r: 3, fill: colour}, g);
      svg("title", {}, dot).textContent = `${one.key}: ${v} (cap ${text(cap)}, ${reason})`;
    }
    const legend = svg("text", {x: L + 8, y: T + 14 + 14 * i, fill: colour, "font-size": 12}, g);
    legend.textContent = `${one.key}: ${last}`;
  });
}
function showDetail(d) {
  document.getElementById("detail").hidden = false;
  document.getElementById("detail-title").textContent = "run " + text(d.run);
  const past = d.source === "history";
  const where = d.source === "log" ? "from its log (read-only)"
    : past ? "finished, from the run history" : "live";
  document.getElementById("past").hidden = !past;
  document.getElementById("now").hidden = past;
  if (past) {
    document.getElementById("detail-prompt").textContent = text(d.prompt);
    document.getElementById("detail-answer").textContent = d.answer || "(no answer)";
    const reasons = document.getElementById("detail-reasons");
    reasons.replaceChildren();
    for (const r of Array.isArray(d.reasons) ? d.reasons : []) item(reasons, text(r));
    if (!reasons.children.length) item(reasons, "none");
  }
  const status = text(d.status) + (d.reason ? " (" + text(d.reason) + ")" : "");
  const line = document.getElementById("detail-status");
  line.textContent = status + ", " + where;
  const unfinished = d.source === "log" && d.status === "unfinished";
  line.classList.toggle("unfinished", unfinished);
  if (mode === "log") {
    live.textContent = unfinished
      ? "an unfinished run, read from its log: it was stopped before its end or still runs"
      : "a finished run, read from its log";
    live.classList.toggle("unfinished", unfinished);
  }
  const tree = document.getElementById("tree");
  tree.replaceChildren();
  if (d.tree) tree.appendChild(node(d.tree));
  const omitted = num(d.omitted) || 0;
  document.getElementById("omitted").textContent =
    omitted ? omitted + " more agent(s) not shown" : "";
  const queue = document.getElementById("queue");
  queue.replaceChildren();
  for (const q of Array.isArray(d.queue) ? d.queue : []) {
    item(queue, `${text(q.description)}: waiting for a slot for ${text(q.waited_s)} s`);
  }
  const slots = num(d.waiting_for_slot);
  if (slots) item(queue, `${slots} workflow agent(s) wait for a slot`);
  if (num(d.held_requests)) item(queue, `${d.held_requests} request(s) held by the pause`);
  if (!queue.children.length) item(queue, "nothing waits");
  const approvals = document.getElementById("approvals");
  approvals.replaceChildren();
  for (const a of Array.isArray(d.approvals) ? d.approvals : []) {
    item(approvals, `[${text(a.agent)}] ${text(a.tool)}: ${text(a.what)} (${text(a.waited_s)} s)`);
  }
  if (!approvals.children.length) item(approvals, "none");
  chart(d);
}
function pick(run) {
  if (picked === run) return;
  picked = run;
  if (detailEvents) detailEvents.close();
  const query = "token=" + encodeURIComponent(token) + "&run=" + encodeURIComponent(run);
  detailEvents = new EventSource("/detail?" + query);
  detailEvents.addEventListener("detail", (event) => showDetail(JSON.parse(event.data)));
  detailEvents.addEventListener("gone", (event) => {
    const status = document.getElementById("detail-status");
    status.textContent = text(JSON.parse(event.data).message);
    status.className = "trouble";
    detailEvents.close();
  });
}
if (mode === "log") {
  document.getElementById("runs-table").hidden = true;
  live.textContent = "a run, read from its log";
  pick("log");
} else {
  const events = new EventSource("/events?token=" + encodeURIComponent(token));
  events.addEventListener("runs", (event) => show(JSON.parse(event.data)));
  events.onerror = () => { live.textContent = "reconnecting..."; };
}
</script></body></html>
"""
