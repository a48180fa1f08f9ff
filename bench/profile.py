"""``python -m bench.profile [--objects N] [--appliers K]``: where a cold apply spends its CPU.

Runs one cold apply on the real stack with py-spy sampling the planner, the watcher and every
applier, then prints, per process, its CPU seconds and the functions with the most samples
(self time, and inclusive time of driftbus's own functions). Flame-graph input (collapsed
stacks) is kept under ``bench/results/profile/`` for a closer look.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import sys
from pathlib import Path

from bench.report import RESULTS_DIR
from bench.stack import BenchStack, cpu_seconds, manifests

OUT = RESULTS_DIR / "profile"


async def _main(objects: int, appliers: int) -> None:
    objs = manifests(objects)
    OUT.mkdir(parents=True, exist_ok=True)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    async with BenchStack.start(objects) as b, b.pipeline(appliers) as d:
        procs = {name: p.pid for name, p in d.p.procs.items()}
        procs["kube-apiserver"] = b.api.process.pid if b.api.process else 0
        cpu0 = {n: cpu_seconds(pid) for n, pid in procs.items()}
        samplers = {
            name: await asyncio.create_subprocess_exec(
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                "200",
                "--format",
                "raw",
                "--nonblocking",
                "-o",
                str(OUT / f"{name}.txt"),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            for name, pid in procs.items()
            if name != "kube-apiserver"
        }
        await asyncio.sleep(1)  # samplers attached
        run = await b.measured(d.cold_apply(objs))
        cpu = {n: cpu_seconds(pid) - cpu0[n] for n, pid in procs.items()}
        for s in samplers.values():
            s.send_signal(2)  # SIGINT: py-spy writes its output and exits
        await asyncio.gather(*(s.wait() for s in samplers.values()))
    print(f"cold apply of {objects} objects with {appliers} applier(s): {run.seconds:.2f}s")
    print("CPU seconds during the run (incl. 1 s of idle sampling before it):")
    for name, secs in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {name:16} {secs:6.2f}s  {secs / objects * 1e3:6.2f} ms/object")
    for name in samplers:
        report(OUT / f"{name}.txt", name)


def report(path: Path, name: str, top: int = 12) -> None:
    selfs: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        selfs[_short(frames[-1])] += n
        for f in {_short(f) for f in frames if "services/" in f or "schemas/" in f}:
            inclusive[f] += n
    print(f"\n{name}: {total} samples")
    print("  self time:")
    for f, n in selfs.most_common(top):
        print(f"    {100 * n / total:5.1f}%  {f}")
    print("  inclusive, driftbus code:")
    for f, n in inclusive.most_common(top):
        print(f"    {100 * n / total:5.1f}%  {f}")


def _short(frame: str) -> str:
    # "function (path/to/file.py:123)" -> "function (file.py)"
    func, _, where = frame.partition(" (")
    return f"{func} ({where.rsplit('/', 1)[-1].split(':')[0]})"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--appliers", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(_main(args.objects, args.appliers))


if __name__ == "__main__":
    main()
