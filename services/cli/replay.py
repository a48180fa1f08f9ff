"""``driftbus replay [--since DUR] [--cluster C]``: the recorded decisions of a period re-run
through this build's decision rule, and every one it would decide otherwise (docs/replay.md).

The records are read once, oldest first, from the DECISIONS stream by an ordered consumer that
starts at ``--since`` (the server skips what is older; ``--cluster`` filters by subject), until
it caught up. Each record is re-run by ``services.planner.rule.replay`` — the planner's own
``step``/``reevaluate`` on the inputs the record kept — and compared on action and reason.
Exit 0: every replayed decision agrees; 2: at least one differs; 1: the bus or the input failed.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import re
import sys
import time
from typing import IO, Any

from schemas.codec import WireError, decision_records
from schemas.replay import NotReplayed, ReplayDifference, ReplayDocument
from schemas.subjects import cluster_filter, family_filter
from services.cli import exits, output, table
from services.common import bus, settings
from services.planner.rule import replay
from services.windows.document import parse_duration

DAYS = re.compile(r"^(\d+)d")
DIFFERS = 2


def since_of(text: str, now: dt.datetime) -> dt.datetime:
    """``now`` minus a duration: a Go duration (``90m``, ``36h``) with days in front (``7d``,
    ``1d12h``); ValueError naming the flag otherwise."""
    days = DAYS.match(text)
    rest = text[days.end() :] if days else text
    try:
        span = dt.timedelta(days=int(days.group(1))) if days else dt.timedelta()
        if rest:
            span += parse_duration(rest)
    except ValueError as exc:
        raise ValueError(f"--since: {exc}; days are written 7d") from None
    if span <= dt.timedelta():
        raise ValueError(f"--since: {text!r} is no duration (e.g. 7d, 36h, 90m)")
    return now - span


class Shown:
    """Progress of a long replay on stderr: a bar on a terminal (rich, as ``publish --wait``),
    elsewhere a plain line every ``every`` seconds and the last one."""

    def __init__(self, out: IO[str] | None = None, every: float = 5.0) -> None:
        self.out = out or sys.stderr
        self.every = every
        self._bar: Any = None
        self._task: Any = None
        self._last = time.monotonic()

    def update(self, done: int, total: int) -> None:
        if self.out.isatty():
            if self._bar is None:
                from rich.console import Console
                from rich.progress import Progress

                self._bar = Progress(console=Console(file=self.out), transient=True)
                self._bar.start()
                self._task = self._bar.add_task("replaying decisions", total=total)
            self._bar.update(self._task, completed=done, total=total)
        elif time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            print(f"replay: {done}/{total} decision records", file=self.out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def difference(r: replay.Replayed) -> ReplayDifference:
    rec, inputs, kept = r.record, r.inputs, r.record.inputs
    if inputs is None or kept is None:  # not replayed, so never a difference
        raise ValueError(f"{rec.key}: a decision without its inputs differs from nothing")
    event = kept.event
    return ReplayDifference(
        at=rec.at,
        cluster=rec.cluster,
        api_group=rec.key.group,
        kind=rec.key.kind,
        namespace=rec.key.namespace,
        name=rec.key.name,
        bundle=rec.bundle,
        revision=rec.revision,
        then_action=str(rec.action),
        then_reason=str(rec.reason),
        now_action=str(r.now.action) if r.now is not None else None,
        now_reason=str(r.now.reason) if r.now is not None else None,
        fact=str(event.__struct_config__.tag) if event is not None else "rebuilt",
        why=replay.explain(inputs),
        planner=rec.planner,
        inputs=kept,
    )


async def read(
    js: bus.JetStream, since: dt.datetime, cluster: str | None, shown: Shown
) -> ReplayDocument:
    """Every decision record of ``cluster`` (every cluster's: None) from ``since`` on, re-run."""
    subject = cluster_filter("decision", cluster) if cluster else family_filter("decision")
    agreed: collections.Counter[str] = collections.Counter()
    skipped: collections.Counter[str] = collections.Counter()
    differences: list[ReplayDifference] = []
    records = read_messages = 0
    try:
        async for m in bus.Follower(js, bus.DECISIONS, subject, since=since).snapshot():
            read_messages += 1  # progress in messages: a message may hold many records
            shown.update(read_messages, read_messages + bus.num_pending(m))
            try:
                batch = decision_records(m.subject, m.data)
            except WireError as exc:
                records += 1
                skipped[f"unreadable: {exc}"] += 1
                continue
            for record in batch:
                records += 1
                r = replay.replayed(record)
                if r.skipped:
                    skipped[r.skipped] += 1
                elif r.differs:
                    differences.append(difference(r))
                else:
                    agreed[f"{r.record.action}:{r.record.reason}"] += 1
    except bus.StreamMissing:
        pass  # nothing was ever decided on this bus
    finally:
        shown.close()
    return ReplayDocument(
        since=since,
        until=dt.datetime.now(dt.UTC),
        cluster=cluster,
        records=records,
        replayed=records - sum(skipped.values()),
        agreed=dict(sorted(agreed.items())),
        differences=differences,
        not_replayed=[NotReplayed(why, n) for why, n in sorted(skipped.items())],
    )


def show(doc: ReplayDocument) -> None:
    where = f"cluster {doc.cluster}" if doc.cluster else "every cluster"
    print(
        f"replayed {doc.replayed} of {doc.records} decision records of {where} since "
        f"{doc.since.isoformat(timespec='seconds')}: {doc.replayed - len(doc.differences)} "
        f"agree, {len(doc.differences)} differ"
    )
    for n in doc.not_replayed:
        print(f"  not replayable: {n.count} ({n.why})")
    if not doc.differences:
        return
    print()
    table.emit(
        [
            {
                "at": d.at.isoformat(timespec="milliseconds") if d.at else "",
                "object": "/".join(
                    p
                    for p in (f"{d.kind}.{d.api_group}" if d.api_group else d.kind, d.namespace)
                    if p
                )
                + f"/{d.name}",
                "bundle": f"{d.bundle}@{d.revision}" if d.revision else d.bundle,
                "then": f"{d.then_action} ({d.then_reason})",
                "now": f"{d.now_action} ({d.now_reason})" if d.now_action else "nothing",
                "why": d.why,
            }
            for d in doc.differences
        ],
        ["at", "object", "bundle", "then", "now", "why"],
        "table",
    )


def cmd_replay(args: argparse.Namespace) -> int:
    from services.cli import reads as user

    try:
        since = since_of(args.since, dt.datetime.now(dt.UTC))
    except ValueError as exc:
        return table.fail("replay", exc)

    async def run() -> int:
        async with user.connected(args) as nc:
            doc = await read(nc.jetstream(), since, args.cluster, Shown())
        if args.output == "table":
            show(doc)
        else:
            output.dump(doc, args.output)
        return DIFFERS if doc.differences else 0

    return exits.run_or_fail("replay", run())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "replay",
        help="re-run the recorded decisions through this build's rule; exit 2 if any differs",
        description="Read the decision records of the period from the DECISIONS stream, make "
        "each decision again with this build's decision rule on the inputs the record kept, and "
        "list every one decided otherwise (then, now, and the inputs). Exit 0 when all agree, "
        "2 when any differs, 1 on errors. Run a new build's replay before rolling it out "
        "(docs/replay.md).",
    )
    p.add_argument(
        "--since",
        default="24h",
        metavar="DUR",
        help="how far back: 7d, 36h, 90m (default %(default)s; the stream keeps 14 days or "
        "2 GiB, whichever ends first)",
    )
    p.add_argument("--cluster", help="only this cluster's decisions (default: every cluster's)")
    output.add_output_arg(p, "cli-replay")
    settings.add_arguments(p, bus.NatsSettings)
    p.set_defaults(func=cmd_replay)
