"""``python -m bench [SCENARIO ...]`` (``make bench SCENARIOS=...``): run benchmarks, print a
table, write ``bench/results/<scenario>.json``."""

from __future__ import annotations

import argparse
import sys

from bench import (
    churn,
    cold,
    durability,
    fleet,
    fleetsim,
    hashing,
    memory,
    plan,
    planner,
    report,
    restart,
    scaling,
    steady,
    tenancy,
    watcher,
    webhook,
)

SCENARIOS = {
    "hashing": hashing.run,
    "planner": planner.run,
    "cold": cold.run,
    "steady": steady.run_steady,
    "drift": steady.run_drift,
    "churn": churn.run,
    "scaling": scaling.run,
    "watcher": watcher.run,
    "durability": durability.run,
    "fleet": fleet.run,
    "fleet-sim": fleetsim.run,
    "tenancy": tenancy.run,
    "webhook": webhook.run,
    "memory": memory.run,
    "memory-fleet": memory.run_fleet,
    "plan": plan.run,
    "restart": restart.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "scenarios",
        nargs="*",
        choices=[*SCENARIOS, []],
        metavar="SCENARIO",
        help=f"default: all ({', '.join(SCENARIOS)})",
    )
    parser.add_argument(
        "--repetitions", type=int, default=None, help="default: each scenario's own (3 to 5)"
    )
    parser.add_argument("--objects", type=int, default=None)
    sim = parser.add_argument_group("fleet-sim only")
    sim.add_argument(
        "--clusters",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="simulated clusters, or several sizes run in turn (100,300,1000); default 1000",
    )
    sim.add_argument("--planners", type=int, default=None, help="planner replicas (default 2)")
    sim.add_argument(
        "--fail-share", type=float, default=None, help="share of clusters reporting Failed"
    )
    sim.add_argument("--idle", type=float, default=None, help="seconds of idle measured (60)")
    sim.add_argument("--limit", type=float, default=None, help="seconds before giving up (900)")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the results table of bench/results/*.json as Markdown; run nothing",
    )
    args = parser.parse_args(argv)
    if args.markdown:
        order = [*SCENARIOS]
        paths = sorted(
            report.RESULTS_DIR.glob("*.json"),
            key=lambda p: order.index(p.stem) if p.stem in order else len(order),
        )
        print(report.markdown(paths))
        return 0
    results = []
    for name in args.scenarios or list(SCENARIOS):
        kwargs = {}
        if args.repetitions:
            kwargs["repetitions"] = args.repetitions
        if args.objects:
            kwargs["objects"] = args.objects
        if name == "plan" and args.clusters:
            kwargs["clusters"] = args.clusters[0]
        if name == "fleet-sim":
            for opt in ("clusters", "planners", "fail_share", "idle", "limit"):
                if getattr(args, opt) is not None:
                    kwargs[opt] = getattr(args, opt)
        print(f"running {name} …", file=sys.stderr, flush=True)
        got = SCENARIOS[name](**kwargs)
        print(f"wrote {report.write(got, stem=name)}", file=sys.stderr)
        results += got
    print(report.table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
