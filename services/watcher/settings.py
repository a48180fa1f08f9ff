"""The watcher's settings: one declaration per setting (flag, environment variable, docs)."""

from __future__ import annotations

import dataclasses

from services.common import bus, telemetry
from services.common.settings import setting
from services.runtime import ClusterSettings


@dataclasses.dataclass(frozen=True)
class WatcherSettings(ClusterSettings, telemetry.TelemetrySettings, bus.NatsSettings):
    watcher_id: str = setting(
        "", "name of this replica in server events (default: <hostname>-<pid>)"
    )
    extra_kinds: tuple[str, ...] = setting(
        (), "apiVersion/Kind list to watch besides the kinds in bundles, comma-separated"
    )
    watch_timeout: int = setting(
        300,
        "seconds a single watch request stays open (server side); "
        "resumed from the last resourceVersion after",
    )
    cluster_labels: tuple[str, ...] = setting(
        (),
        "KEY=VALUE labels the cluster gets in the fleet registry when it first registers, "
        "comma-separated (later changes: driftbus clusters label)",
    )
    list_page_size: int = setting(500, "objects per list page (limit/continue)")
    batch_events: int = setting(
        1000,
        "most server facts one NATS message carries (a list page, a burst of watch events); "
        "1 sends every fact alone, as before issue 44",
    )
    retry_delay: float = setting(
        2.0, "seconds between attempts while a kind is unknown or the API server is unreachable"
    )
