// driftbus status page: state from /events (server-sent events), rendered without a framework.
"use strict";
const state = { bundles: {}, objects: {}, drift: [], stats: {}, windows: { windows: [], bundles: {}, problem: "" } };
let selected = null;
let selectedObject = null;
let shownRevisionsOf = null;
const SVG = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs = {}) => {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};

const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
};
const badge = (text) => el("span", { class: `badge ${text}` }, text);
const bundleId = (b) => `${b.cluster}/${b.bundle}`;
// the page's own ?tenant= (one tenant's view) goes to every request it makes
const tenant = new URLSearchParams(location.search).get("tenant");
const withTenant = (q) => { if (tenant !== null) q.set("tenant", tenant); return q; };

function renderBundles() {
  const body = document.querySelector("#bundles tbody");
  body.replaceChildren(...Object.values(state.bundles)
    .sort((a, b) => bundleId(a).localeCompare(bundleId(b)))
    .map((b) => {
      const row = el("tr", { class: "selectable" + (bundleId(b) === selected ? " selected" : ""),
                             "data-bundle": bundleId(b), "data-phase": b.phase },
        el("td", {}, b.cluster), el("td", {}, b.bundle), el("td", {}, b.revision),
        el("td", {}, badge(b.phase)), el("td", {}, `${b.counts.applied}/${b.counts.total}`),
        el("td", {}, `${b.counts.ready}/${b.counts.total}`), el("td", {}, `${b.counts.failed}`),
        el("td", {}, notes(b)), el("td", {}, b.message));
      row.onclick = () => { selected = bundleId(b); selectedObject = null; render(); };
      return row;
    }));
}

function notes(b) {
  const out = [];
  if (b.suspended) out.push("suspended");
  if (b.rollback_of) out.push(`rollback of ${b.rollback_of}`);
  if ((b.depends_on || []).length) out.push(`after ${b.depends_on.join(", ")}`);
  const w = (state.windows.bundles || {})[bundleId(b)];
  if (w && w.held) out.push(w.held);
  else if (w && w.next_change) out.push(`sync window: next change ${w.next_change}`);
  return out.join("; ");
}

async function renderRevisions() {
  const b = state.bundles[selected];
  if (!b || shownRevisionsOf === `${selected}@${b.revision}`) return;
  shownRevisionsOf = `${selected}@${b.revision}`;
  const q = withTenant(new URLSearchParams({ cluster: b.cluster, bundle: b.bundle }));
  const doc = await (await fetch(`/api/bundle?${q}`)).json();
  document.querySelector("#revisions").replaceChildren(...doc.revisions.map((r, i) =>
    el("li", { "data-revision": r.revision, class: i === 0 ? "current" : "" },
      `${(r.published_at || "").replace("T", " ").slice(0, 19)} ${r.revision}`,
      r.delete ? " — deletion" : ` — ${r.objects} objects`,
      r.rollback_of ? el("span", { class: "badge rollback" }, `rollback of ${r.rollback_of}`) : "",
      r.source ? el("span", { class: "muted" }, ` ${r.source}`) : "")));
}

async function showObject(o) {
  selectedObject = o;
  const q = withTenant(new URLSearchParams({ cluster: o.cluster, bundle: o.bundle,
    group: o.key.group, kind: o.key.kind, namespace: o.key.namespace, name: o.key.name }));
  const doc = await (await fetch(`/api/object?${q}`)).json();
  if (selectedObject !== o) return;
  document.querySelector("#detail").hidden = false;
  document.querySelector("#detail-object").textContent = `${doc.object} (${doc.cluster}/${doc.bundle})`;
  const err = doc.last_error;
  document.querySelector("#detail-error").replaceChildren(err
    ? el("span", {}, badge(err.phase), ` ${err.message}`)
    : el("span", { class: "muted" }, "no error reported"));
  document.querySelector("#detail-diff-note").textContent =
    doc.diff == null ? doc.diff_note : (doc.diff.length ? "fields that differ from the manifest:" : "live matches the manifest");
  document.querySelector("#detail-diff").replaceChildren(...(doc.diff || []).map((c) =>
    el("div", { class: c.added ? "add" : c.removed ? "remove" : "change" },
      c.added ? `+ ${c.path}: ${JSON.stringify(c.desired)} (not live)`
        : c.removed ? `- ${c.path}: ${JSON.stringify(c.live)}`
        : `~ ${c.path}: live ${c.live_type ? `(a ${c.live_type}, not shown)` : JSON.stringify(c.live)} → desired ${JSON.stringify(c.desired)}`)));
  document.querySelector("#detail-decisions tbody").replaceChildren(...[...doc.decisions].reverse().map((d) =>
    el("tr", { "data-action": d.action, "data-reason": d.reason },
      el("td", {}, (d.at || "").replace("T", " ").slice(0, 23)), el("td", {}, d.revision),
      el("td", {}, badge(d.action)), el("td", {}, d.reason),
      el("td", {}, ["apply", "delete"].includes(d.action) ? (d.identity || "driftbus") : ""))));
}

function renderObjects() {
  if (!selected && Object.keys(state.bundles).length) selected = Object.keys(state.bundles).sort()[0];
  document.querySelector("#selected").textContent = selected ? `of ${selected}` : "";
  const objs = Object.values(state.objects[selected] || {}).sort((a, b) => a.object.localeCompare(b.object));
  document.querySelector("#objects tbody").replaceChildren(...objs.map((o) =>
    Object.assign(el("tr", { "data-object": o.object, "data-phase": o.phase,
                             class: "selectable" + (selectedObject && selectedObject.object === o.object ? " selected" : "") },
      el("td", {}, o.object), el("td", {}, badge(o.phase)),
      el("td", { title: o.health_message || "" }, badge(o.health)),
      el("td", {}, o.message), el("td", {}, `${o.attempts}`)), { onclick: () => showObject(o) })));
}

function renderCharts() {
  const minutes = state.stats.minutes || [];
  const chart = document.querySelector("#writes-chart");
  const top = Math.max(1, ...minutes.map((m) => m.writes + m.avoided));
  const w = 600 / Math.max(1, minutes.length);
  chart.replaceChildren(...minutes.flatMap((m, i) => {
    const hw = (130 * m.writes) / top, ha = (130 * m.avoided) / top;
    return [
      svgEl("rect", { class: "avoided", x: i * w + 1, width: w - 2, y: 140 - ha - hw, height: ha,
                      "data-minute": m.minute, "data-avoided": m.avoided }),
      svgEl("rect", { class: "writes", x: i * w + 1, width: w - 2, y: 140 - hw, height: hw,
                      "data-minute": m.minute, "data-writes": m.writes }),
    ];
  }));
  const fixes = state.stats.corrections || [];
  const ttc = document.querySelector("#ttc-chart");
  const slowest = Math.max(0.001, ...fixes.map((c) => c.seconds));
  const now = Date.now() / 1000;
  ttc.replaceChildren(...fixes.map((c) => {
    const x = 600 - (600 * (now - Date.parse(c.at) / 1000)) / 3600;
    const dot = svgEl("circle", { class: "correction", cx: Math.max(4, Math.min(596, x)),
                                  cy: 136 - (128 * c.seconds) / slowest, r: 4, "data-seconds": c.seconds });
    dot.append(svgEl("title")); dot.firstChild.textContent = `${c.object}: ${c.seconds}s`;
    return dot;
  }));
  const sorted = fixes.map((c) => c.seconds).sort((a, b) => a - b);
  document.querySelector("#ttc-summary").textContent = sorted.length
    ? `${sorted.length} corrected, median ${sorted[Math.floor(sorted.length / 2)].toFixed(3)} s, slowest ${sorted[sorted.length - 1].toFixed(3)} s`
    : "none";
}

// newest first; at the same instant a correction goes above the detection it answers
const driftOrder = (a, b) => (b.at || "").localeCompare(a.at || "") ||
  (a.event === "corrected" ? -1 : 1) - (b.event === "corrected" ? -1 : 1);

function renderDrift() {
  document.querySelector("#drift").replaceChildren(...[...state.drift].sort(driftOrder).slice(0, 50).map((d) =>
    el("li", { class: d.event, "data-object": d.object, "data-event": d.event },
      `${(d.at || "").replace("T", " ").slice(0, 19)} ${d.event}: ${d.object} (${d.cluster}/${d.bundle}) — ${d.detail}`)));
}

// the sync windows in force: each one open or closed now, and its next change
function renderWindows() {
  const w = state.windows;
  document.querySelector("#windows-section").hidden = !(w.windows.length || w.problem);
  document.querySelector("#windows-problem").textContent =
    w.problem ? `the latest windows on the bus are unusable (${w.problem}); the last good ones stay in force` : "";
  document.querySelector("#windows tbody").replaceChildren(...w.windows.map((r) =>
    el("tr", { "data-window": r.name, "data-active": `${r.active}` },
      el("td", {}, r.name), el("td", {}, r.kind), el("td", {}, r.schedule), el("td", {}, r.duration),
      el("td", {}, r.timeZone), el("td", {}, r.bundles.join(", ")), el("td", {}, r.clusters.join(", ")),
      el("td", {}, badge(r.active ? "open" : "closed")),
      el("td", {}, r.nextChange ? `${r.active ? "closes" : "opens"} ${r.nextChange}` : "–"))));
}

function renderStats() {
  const s = state.stats;
  // no ratio yet: nothing decided could have been a hit (new objects' first applies only)
  document.querySelector("#hit-ratio").textContent =
    s.hit_ratio == null ? "no decisions that could hit yet" : `${(100 * s.hit_ratio).toFixed(2)} %`;
  document.querySelector("#decisions").textContent = s.decisions ?? 0;
  document.querySelector("#pending").textContent =
    Object.values(s.pending || {}).reduce((a, b) => a + b, 0);
}

function render() {
  renderBundles(); renderObjects(); renderDrift(); renderStats(); renderCharts(); renderRevisions();
  renderWindows();
}

function connect() {
  const live = document.querySelector("#live");
  const source = new EventSource(`/events?${withTenant(new URLSearchParams())}`);
  source.addEventListener("open", () => { live.textContent = "live"; live.className = "badge on"; });
  source.addEventListener("error", () => { live.textContent = "reconnecting"; live.className = "badge off"; });
  source.addEventListener("state", (e) => {
    const s = JSON.parse(e.data);
    state.bundles = Object.fromEntries(s.bundles.map((b) => [bundleId(b), b]));
    state.objects = Object.fromEntries(Object.entries(s.objects).map(([k, objs]) =>
      [k, Object.fromEntries(objs.map((o) => [o.object, o]))]));
    state.drift = s.drift; state.stats = s.stats; state.windows = s.windows || state.windows; render();
  });
  source.addEventListener("windows", (e) => {
    state.windows = JSON.parse(e.data); renderWindows(); renderBundles();
  });
  source.addEventListener("bundle", (e) => {
    const b = JSON.parse(e.data); state.bundles[bundleId(b)] = b; render();
  });
  source.addEventListener("object", (e) => {
    const o = JSON.parse(e.data); const k = bundleId(o);
    (state.objects[k] ||= {})[o.object] = o; render();
  });
  source.addEventListener("drift", (e) => {
    state.drift.unshift(JSON.parse(e.data)); state.drift.length = Math.min(state.drift.length, 200); render();
  });
  source.addEventListener("stats", (e) => {
    state.stats = JSON.parse(e.data); renderStats(); renderCharts();
  });
}

connect();
