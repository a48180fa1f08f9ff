// driftbus status page: state from /events (server-sent events), rendered without a framework.
"use strict";
const state = { bundles: {}, objects: {}, drift: [], stats: {} };
let selected = null;

const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
};
const badge = (text) => el("span", { class: `badge ${text}` }, text);
const bundleId = (b) => `${b.cluster}/${b.bundle}`;

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
        el("td", {}, b.message));
      row.onclick = () => { selected = bundleId(b); render(); };
      return row;
    }));
}

function renderObjects() {
  if (!selected && Object.keys(state.bundles).length) selected = Object.keys(state.bundles).sort()[0];
  document.querySelector("#selected").textContent = selected ? `of ${selected}` : "";
  const objs = Object.values(state.objects[selected] || {}).sort((a, b) => a.object.localeCompare(b.object));
  document.querySelector("#objects tbody").replaceChildren(...objs.map((o) =>
    el("tr", { "data-object": o.object, "data-phase": o.phase },
      el("td", {}, o.object), el("td", {}, badge(o.phase)),
      el("td", { title: o.health_message || "" }, badge(o.health)),
      el("td", {}, o.message), el("td", {}, `${o.attempts}`))));
}

// newest first; at the same instant a correction goes above the detection it answers
const driftOrder = (a, b) => (b.at || "").localeCompare(a.at || "") ||
  (a.event === "corrected" ? -1 : 1) - (b.event === "corrected" ? -1 : 1);

function renderDrift() {
  document.querySelector("#drift").replaceChildren(...[...state.drift].sort(driftOrder).slice(0, 50).map((d) =>
    el("li", { class: d.event, "data-object": d.object, "data-event": d.event },
      `${(d.at || "").replace("T", " ").slice(0, 19)} ${d.event}: ${d.object} (${d.cluster}/${d.bundle}) — ${d.detail}`)));
}

function renderStats() {
  const s = state.stats;
  document.querySelector("#hit-ratio").textContent =
    s.hit_ratio == null ? "–" : `${(100 * s.hit_ratio).toFixed(2)} %`;
  document.querySelector("#decisions").textContent = s.decisions ?? 0;
  document.querySelector("#pending").textContent =
    Object.values(s.pending || {}).reduce((a, b) => a + b, 0);
}

function render() { renderBundles(); renderObjects(); renderDrift(); renderStats(); }

function connect() {
  const live = document.querySelector("#live");
  const source = new EventSource("/events");
  source.addEventListener("open", () => { live.textContent = "live"; live.className = "badge on"; });
  source.addEventListener("error", () => { live.textContent = "reconnecting"; live.className = "badge off"; });
  source.addEventListener("state", (e) => {
    const s = JSON.parse(e.data);
    state.bundles = Object.fromEntries(s.bundles.map((b) => [bundleId(b), b]));
    state.objects = Object.fromEntries(Object.entries(s.objects).map(([k, objs]) =>
      [k, Object.fromEntries(objs.map((o) => [o.object, o]))]));
    state.drift = s.drift; state.stats = s.stats; render();
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
  source.addEventListener("stats", (e) => { state.stats = JSON.parse(e.data); renderStats(); });
}

connect();
