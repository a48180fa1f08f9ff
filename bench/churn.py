"""Scenario `churn` (issue 15): other controllers and clients write to the objects all the time.

A cluster with running controllers (kube-controller-manager, kube-scheduler, and kwok standing
in for kubelets, so Pods run and Deployments become Available) holds ``objects`` objects of one
bundle: 10 % Deployments whose manifests leave ``replicas`` to a scaler (as for an HPA), 10 %
Services, 50 % ConfigMaps, 20 % Secrets, 10 % Roles. Then, for ``rounds`` rounds of
``interval`` seconds, the same seeded churn for every contender:

* 10 % of the Deployments are scaled through ``/scale`` (manager ``hpa-like``);
* 5 % are rolled out (``kubectl rollout restart``'s template annotation, manager
  ``kubectl-rollout``), so their controllers write new ReplicaSets, Pods and status;
* in each of the first rounds one ConfigMap, 1 % of the objects in all (10 of 1,000, in rounds
  1–10 of 12), has a field the reconciler owns taken over by force by manager ``intruder``
  (``kubectl apply --force-conflicts``): the real drift, which must be corrected exactly once;
* the reconciler's periodic check: driftbus gets the bundle republished (what a Git poll
  does); the Flux-style loop makes one pass.

Contenders (a fresh cluster each):

* **driftbus** — drift over the fields its manager owns (the default);
* **driftbus, whole objects** — ``DRIFTBUS_WHOLE_OBJECT_DRIFT=true``: the rule before issue 15
  (Plural's): any change another client makes to the pruned object is drift;
* **Flux-style loop** — what kustomize-controller does each interval: per object a GET and a
  server-side dry-run apply, and a real apply only where the dry-run differs from the live
  object (metadata the server maintains left out of the comparison).

Measured over the churn rounds: the reconciler's **writes** (driftbus: its apply/delete
*decisions* — an apply retried after a 429 is one; the loop: its own applies), its **hit ratio**
(driftbus: hit decisions of all its decisions, DESIGN §3 — hits are recorded per object per
reconcile, so with R reconciles of N objects it is 1 − writes / (R·N + writes); the loop:
checks that found nothing to write), and **API requests by all clients** (non-watch requests
the API server served from the first round until 5 s after the last: the churn and the
controllers are the same in every run, so the difference is the reconciler's; each contender
has a fresh cluster of its own). Afterwards every intruded field must be back and every scaled
Deployment must keep the scaler's replicas.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import sys
import time
from typing import Any

import orjson

from bench.report import Result
from bench.stack import BenchStack, labelled, object_path
from bench.steady import Decisions
from harness.pipeline import requests_served
from schemas.decision import DecisionAction

NAMESPACE = "churn"
_APPLY = {"Content-Type": "application/apply-patch+yaml"}
_SERVER_KEPT = ("managedFields", "resourceVersion", "generation")
_SETTLE = 5.0
"""Seconds after the last round before requests are counted (the same for every contender)."""


def churn_manifests(objects: int, *, seed: int = 7) -> list[dict[str, Any]]:
    """The bundle: seeded, ``objects`` manifests in namespace ``churn`` (made beforehand)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    shares = [("Deployment", 0.1), ("Service", 0.1), ("Secret", 0.2), ("Role", 0.1)]
    counts = {kind: max(1, int(objects * share)) for kind, share in shares}
    counts["ConfigMap"] = max(1, objects - sum(counts.values()))
    for kind, n in counts.items():
        for i in range(n):
            meta = {"name": f"{kind.lower()}-{i}", "namespace": NAMESPACE}
            app = {"app": f"{kind.lower()}-{i}"}
            if kind == "Deployment":
                container = {"name": "app", "image": f"registry.example/app:{rng.randint(1, 9)}"}
                out.append(
                    {
                        "apiVersion": "apps/v1",
                        "kind": kind,
                        "metadata": meta,
                        "spec": {  # no replicas: the scaler's
                            "selector": {"matchLabels": app},
                            "template": {
                                "metadata": {"labels": app},
                                "spec": {"containers": [container]},
                            },
                        },
                    }
                )
            elif kind == "Service":
                port = {"port": 80, "targetPort": 8080}
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": kind,
                        "metadata": meta,
                        "spec": {"selector": app, "ports": [port]},
                    }
                )
            elif kind == "Secret":
                value = {"token": f"{rng.getrandbits(64):016x}"}
                out.append(
                    {"apiVersion": "v1", "kind": kind, "metadata": meta, "stringData": value}
                )
            elif kind == "Role":
                rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
                out.append(
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": kind,
                        "metadata": meta,
                        "rules": [rule],
                    }
                )
            else:
                words = " ".join(rng.choices(["alpha", "beta", "gamma", "delta"], k=8))
                data = {f"key-{k}": words for k in range(3)}
                out.append({"apiVersion": "v1", "kind": kind, "metadata": meta, "data": data})
    return out


class Churn:
    """The seeded schedule of other clients' writes, the same for every contender."""

    def __init__(self, b: BenchStack, objs: list[dict[str, Any]], rounds: int, seed: int = 11):
        rng = random.Random(seed)
        deployments = [o for o in objs if o["kind"] == "Deployment"]
        configmaps = [o for o in objs if o["kind"] == "ConfigMap"]
        self.b = b
        self.drifted = max(1, len(objs) // 100)
        self.rounds = [
            (
                rng.sample(deployments, max(1, len(deployments) // 10)),
                rng.sample(deployments, max(1, len(deployments) // 20)),
                configmaps[r] if r < self.drifted else None,
                [rng.randint(1, 3) for _ in deployments],
            )
            for r in range(rounds)
        ]
        self.replicas: dict[str, int] = {}
        """Deployment name → what the scaler set last."""
        self.intruded: list[dict[str, Any]] = []

    async def round(self, r: int) -> None:
        scaled, rolled, intruded, sizes = self.rounds[r]
        calls = []
        for d, size in zip(scaled, sizes, strict=False):
            self.replicas[d["metadata"]["name"]] = size
            calls.append(
                self.b.request(
                    "PATCH",
                    object_path(d) + "/scale",
                    params={"fieldManager": "hpa-like"},
                    data=orjson.dumps({"spec": {"replicas": size}}),
                    headers={"Content-Type": "application/merge-patch+json"},
                )
            )
        for d in rolled:
            stamp = {"kubectl.kubernetes.io/restartedAt": f"round-{r}"}
            patch = {"spec": {"template": {"metadata": {"annotations": stamp}}}}
            calls.append(
                self.b.request(
                    "PATCH",
                    object_path(d),
                    params={"fieldManager": "kubectl-rollout"},
                    data=orjson.dumps(patch),
                    headers={"Content-Type": "application/strategic-merge-patch+json"},
                )
            )
        if intruded is not None:
            first = next(iter(intruded["data"]))
            changed = {**intruded, "data": {first: f"changed by hand in round {r}"}}
            self.intruded.append(intruded)
            calls.append(
                self.b.request(
                    "PATCH",
                    object_path(intruded),
                    params={"fieldManager": "intruder", "force": "true"},
                    data=orjson.dumps(changed),
                    headers=_APPLY,
                )
            )
        await asyncio.gather(*calls)

    async def check_outcome(self) -> None:
        """Every intruded field is back and every scaled Deployment keeps the scaler's size."""
        for cm in self.intruded:
            live = await self.b.request("GET", object_path(cm))
            if live["data"] != cm["data"]:
                raise RuntimeError(f"{cm['metadata']['name']}: drift not corrected: {live['data']}")
        for name, size in self.replicas.items():
            path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}"
            if (got := (await self.b.request("GET", path))["spec"]["replicas"]) != size:
                raise RuntimeError(f"Deployment {name}: replicas {got}, the scaler set {size}")


class FluxLoop:
    """Per pass and object: GET, server-side dry-run apply, and an apply where they differ."""

    def __init__(self, b: BenchStack, objs: list[dict[str, Any]], in_flight: int = 16):
        self.b = b
        self.objs = labelled(objs)
        self.in_flight = in_flight
        self.checks = self.writes = 0

    async def _apply(self, obj: dict[str, Any], *, dry_run: bool) -> Any:
        params = {"fieldManager": "flux-style-loop", "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return await self.b.request(
            "PATCH", object_path(obj), params=params, data=orjson.dumps(obj), headers=_APPLY
        )

    async def apply_all(self) -> None:
        await self._each(lambda o: self._apply(o, dry_run=False))

    async def one_pass(self) -> None:
        async def check(obj: dict[str, Any]) -> None:
            for _ in range(3):
                live = await self.b.request("GET", object_path(obj))
                dry = await self._apply(obj, dry_run=True)
                # a controller wrote in between (a rollout's revision annotation): not drift
                if dry["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]:
                    break
            self.checks += 1
            if _comparable(live) != _comparable(dry):
                self.writes += 1
                await self._apply(obj, dry_run=False)

        await self._each(check)

    async def _each(self, work: Any) -> None:
        queue = list(reversed(self.objs))

        async def worker() -> None:
            while queue:
                await work(queue.pop())

        await asyncio.gather(*(worker() for _ in range(self.in_flight)))


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in _SERVER_KEPT}
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")} | {"metadata": meta}


def _cluster(objects: int) -> contextlib.AbstractAsyncContextManager[BenchStack]:
    return BenchStack.start(objects, controllers=True, namespaces=[NAMESPACE])


async def _available(b: BenchStack, deployments: int, within: float = 300) -> None:
    """Until every Deployment of the bundle is Available (its controller and kwok at work)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        listed = await b.request("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")
        ready = sum(
            1
            for d in listed["items"]
            if any(
                c["type"] == "Available" and c["status"] == "True"
                for c in d.get("status", {}).get("conditions", [])
            )
        )
        if ready >= deployments:
            return
        await asyncio.sleep(1)
    raise RuntimeError(f"only {ready} of {deployments} Deployments became Available")


class Outcome:
    def __init__(self, writes: int, ratio: float, requests: int, seconds: float):
        self.writes, self.ratio, self.requests, self.seconds = writes, ratio, requests, seconds


async def _driftbus(
    objs: list[dict[str, Any]], rounds: int, interval: float, *, whole: bool
) -> Outcome:
    async with _cluster(len(objs)) as b, b.pipeline(2, start=False) as d:
        if whole:
            d.p.extra_env["DRIFTBUS_WHOLE_OBJECT_DRIFT"] = "true"
        await d.start()
        decisions = Decisions()
        await decisions.start(d.nc)
        await d.cold_apply(objs)
        await _available(b, sum(1 for o in objs if o["kind"] == "Deployment"))
        await _quiet(decisions)
        churn = Churn(b, objs, rounds)
        before, requests0, started = (
            collections.Counter(decisions.counts),
            requests_served(b.api),
            time.monotonic(),
        )
        for r in range(rounds):
            t0 = time.monotonic()
            await churn.round(r)
            await asyncio.sleep(interval / 2)
            await d.publish(objs, revision="r1")  # the periodic reconcile: same revision
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))
        await asyncio.sleep(_SETTLE)
        seconds = time.monotonic() - started
        requests = requests_served(b.api) - requests0  # the same window as the loop's
        await _quiet(decisions)  # the last republish's decisions are all in
        delta = decisions.counts - before
        await churn.check_outcome()
        writes = delta[str(DecisionAction.APPLY)] + delta[str(DecisionAction.DELETE)]
        return Outcome(
            writes, delta[str(DecisionAction.HIT)] / sum(delta.values()), requests, seconds
        )


async def _quiet(decisions: Decisions, quiet: float = 5.0, within: float = 300) -> None:
    """Until no decision has been made for ``quiet`` seconds."""
    deadline = time.monotonic() + within
    last = sum(decisions.counts.values())
    calm_since = time.monotonic()
    while time.monotonic() - calm_since < quiet:
        if time.monotonic() > deadline:
            raise RuntimeError("decisions never stopped")
        await asyncio.sleep(0.5)
        if (now := sum(decisions.counts.values())) != last:
            last, calm_since = now, time.monotonic()


async def _flux(objs: list[dict[str, Any]], rounds: int, interval: float) -> Outcome:
    async with _cluster(len(objs)) as b:
        loop = FluxLoop(b, objs)
        await loop.apply_all()
        await _available(b, sum(1 for o in objs if o["kind"] == "Deployment"))
        await asyncio.sleep(5)
        churn = Churn(b, objs, rounds)
        requests0, started = requests_served(b.api), time.monotonic()
        for r in range(rounds):
            t0 = time.monotonic()
            await churn.round(r)
            await asyncio.sleep(interval / 2)
            await loop.one_pass()  # finds this round's drift
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))
        await asyncio.sleep(_SETTLE)
        seconds = time.monotonic() - started
        requests = requests_served(b.api) - requests0
        await churn.check_outcome()
        return Outcome(loop.writes, 1 - loop.writes / loop.checks, requests, seconds)


async def _main(objects: int, repetitions: int, rounds: int, interval: float) -> list[Result]:
    objs = churn_manifests(objects)
    drifted = min(rounds, max(1, objects // 100))
    runs: dict[str, list[Outcome]] = {"owned": [], "whole": [], "flux": []}
    for rep in range(repetitions):
        runs["owned"].append(await _driftbus(objs, rounds, interval, whole=False))
        runs["whole"].append(await _driftbus(objs, rounds, interval, whole=True))
        runs["flux"].append(await _flux(objs, rounds, interval))
        shown = ", ".join(
            f"{k}: {v[-1].writes} writes, hit {v[-1].ratio:.4f}, {v[-1].requests} requests"
            for k, v in runs.items()
        )
        print(
            f"  churn rep {rep + 1}/{repetitions} ({drifted} drifted): {shown}",
            file=sys.stderr,
            flush=True,
        )
    params = {"objects": objects, "rounds": rounds, "interval_s": interval, "drifted": drifted}

    def samples(kind: str, field: str) -> list[float]:
        return [float(getattr(o, field)) for o in runs[kind]]

    return [
        Result(
            "churn-writes-vs-whole-object",
            "writes",
            samples("owned", "writes"),
            "driftbus, whole-object hashing",
            samples("whole", "writes"),
            params,
            higher_is_better=False,
            target=f"driftbus = {drifted} (the objects drifted in owned fields)",
        ),
        Result(
            "churn-writes-vs-flux-loop",
            "writes",
            samples("owned", "writes"),
            "Flux-style loop (GET + dry-run per object per interval)",
            samples("flux", "writes"),
            params,
            higher_is_better=False,
        ),
        Result(
            "churn-hit-ratio",
            "ratio",
            samples("owned", "ratio"),
            "target",
            [0.999] * repetitions,
            params,
            target="ratio ≥ 1 (hit ratio ≥ 99.9 %)",
        ),
        Result(
            "churn-hit-ratio-whole-object",
            "ratio",
            samples("whole", "ratio"),
            "target",
            [0.999] * repetitions,
            params,
        ),
        Result(
            "churn-api-requests-vs-flux-loop",
            "requests",
            samples("owned", "requests"),
            "Flux-style loop",
            samples("flux", "requests"),
            params,
            higher_is_better=False,
        ),
    ]


def run(
    *, objects: int = 1000, repetitions: int = 1, rounds: int = 12, interval: float = 10.0
) -> list[Result]:
    return asyncio.run(_main(objects, repetitions, rounds, interval))
