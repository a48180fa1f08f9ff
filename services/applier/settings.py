"""The applier's settings: flags, environment and defaults (``driftbus applier --help``).

Apart from the service, so that the command line reads them without loading the applier."""

from __future__ import annotations

import dataclasses

from services.common import bus, telemetry
from services.common.settings import setting
from services.runtime import ClusterSettings


@dataclasses.dataclass(frozen=True)
class ApplierSettings(ClusterSettings, telemetry.TelemetrySettings, bus.NatsSettings):
    applier_id: str = setting(
        "", "name of this replica in applied events (default: <hostname>-<pid>)"
    )
    concurrency: int = setting(16, "intents applied at the same time by this replica")
    report_facts: int = setting(
        256,
        "most applied facts one report carries (those finished within 10 ms of each other go "
        "together); 1 sends every fact alone, as before issue 44",
    )
    max_backoff: float = setting(
        60.0,
        "longest delay in seconds between retries of a transient error (429, 5xx, timeout) or "
        "of an object waiting for its CRD or namespace; retried for as long as the cause lasts",
    )
    ack_wait: float = setting(
        10.0,
        "seconds before an unacked intent is redelivered: how long the intents of a replica "
        "that died wait for another (slow applies stay claimed: progress is signalled every "
        "third of it)",
    )
    max_deliver: int = setting(
        -1,
        "deliveries of one intent before it is reported Failed naming its last cause (-1: no "
        "limit, transient causes are retried for as long as they last)",
    )
    fence_refresh: float = setting(
        30.0,
        "seconds between reads of the cluster's planner claim besides those its writes trigger "
        "(a take-over is seen as it is written): how soon a take-over made while this replica's "
        "connection was down fences off the deposed planner's intents, if no intent of the new "
        "one came first",
    )
    sops_age_key_file: str = setting(
        "",
        "age key file (as age-keygen writes it) with which this replica decrypts SOPS-encrypted "
        "Secrets just before applying them; the only place driftbus holds the key. Without it "
        "such a Secret is Failed. With --sops-key-dir, the platform's key: for platform bundles "
        "only. Give every applier of a cluster the same keys (docs/secrets.md)",
        env="SOPS_AGE_KEY_FILE",
    )
    sops_key_dir: str = setting(
        "",
        "directory of per-tenant age keys, one file TENANT.agekey per tenant (read at each "
        "decryption: a key added needs no restart); with it a tenant's SOPS Secrets are "
        "decrypted with its own key only, never with --sops-age-key-file, and fail without one",
    )
    sops_non_age_keys: bool = setting(
        False,
        "let sops try a SOPS file's keys other than age (kms, gcp_kms, hckms, azure_kv, "
        "hc_vault, pgp) when its age key fails, with this node's credentials (the instance's "
        "metadata service, and the AWS_*, GOOGLE_*, CLOUDSDK_*, HUAWEICLOUD_*, AZURE_*, VAULT_* "
        "and GNUPGHOME variables of the applier's environment); with --sops-key-dir for "
        "platform bundles only. Off: such a file is Failed",
    )
