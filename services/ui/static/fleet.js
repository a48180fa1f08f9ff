// driftbus status page, fleet view: the matrix of bundles × clusters and each rollout's progress,
// from /api/fleet (polled; the rollout states live in a KV bucket, not on the status stream).
// Uses el, badge and withTenant from app.js.
"use strict";
const FLEET_POLL_MS = 3000;
const shortTime = (at) => (at || "").replace("T", " ").slice(0, 19);

function renderMatrix(doc) {
  const head = document.querySelector("#fleet-matrix thead");
  head.replaceChildren(el("tr", {}, el("th", {}, "bundle"), ...doc.clusters.map((c) =>
    el("th", { "data-cluster": c.name, class: c.registered ? "" : "unregistered",
               title: Object.entries(c.labels).map(([k, v]) => `${k}=${v}`).join(", ") ||
                 (c.registered ? "no labels" : "not in the registry") }, c.name))));
  document.querySelector("#fleet-matrix tbody").replaceChildren(...doc.rows.map((r) =>
    el("tr", { "data-bundle": r.bundle, "data-fleet": r.fleet },
      el("th", {}, r.bundle, r.fleet ? el("span", { class: "muted" }, " fleet") : ""),
      ...r.cells.map((c) => el("td", { class: `cell tone-${c.tone}`, title: c.title,
                                       "data-cluster": c.cluster, "data-tone": c.tone,
                                       "data-rollout": c.rollout || "" }, c.label)))));
}

function renderRollout(r) {
  const bake = r.bake_remaining == null ? "" : ` — bake ${r.bake_remaining.toFixed(0)} s left of ${r.bake} s`;
  return el("div", { class: "rollout", "data-bundle": r.bundle, "data-phase": r.phase },
    el("h3", {}, `${r.bundle}@${r.revision} `, badge(r.phase),
      r.paused ? el("span", { class: "badge Paused" }, "paused") : "",
      el("span", { class: "progress" },
        ` step ${r.step}/${r.steps}, ${r.ready}/${r.total} clusters Ready${bake}`),
      r.rollback.length ? el("span", { class: "progress back" },
        `, ${r.rollback_ready}/${r.rollback.length} back Ready on ${r.previous}`) : ""),
    r.message ? el("p", { class: "muted" }, r.message) : "",
    el("ol", { class: "steps" }, ...r.selectors.map((s) =>
      el("li", { class: s.state, "data-step": s.step },
        el("code", {}, s.selector), ` ${s.clusters.join(", ") || "no clusters"}`))),
    Object.keys(r.excluded).length ? el("p", { class: "excluded" }, "excluded: " +
      Object.entries(r.excluded).map(([c, why]) => `${c} (${why})`).join("; ")) : "",
    el("table", { class: "transitions" },
      el("thead", {}, el("tr", {}, ...["at", "#", "event", "step", "clusters", "message"]
        .map((h) => el("th", {}, h)))),
      el("tbody", {}, ...r.events.map((e) =>
        el("tr", { "data-event": e.event, "data-seq": e.seq },
          el("td", {}, shortTime(e.at)), el("td", {}, `${e.seq}`), el("td", {}, badge(e.event)),
          el("td", {}, `${e.step}`), el("td", {}, e.clusters.join(", ")), el("td", {}, e.message))))));
}

async function pollFleet() {
  try {
    const resp = await fetch(`/api/fleet?${withTenant(new URLSearchParams())}`);
    if (resp.ok) {
      const doc = await resp.json();
      // one cluster and no rollout: the bundles table above already says it all
      document.querySelector("#fleet").hidden = doc.clusters.length < 2 && !doc.rollouts.length;
      renderMatrix(doc);
      document.querySelector("#rollouts").replaceChildren(...doc.rollouts.map(renderRollout));
    }
  } finally {
    setTimeout(pollFleet, FLEET_POLL_MS);
  }
}

pollFleet();
