"""``driftbus notify apply|show`` without a bus: a refused file changes nothing and exits 1;
``show`` prints where each provider sends and the paths of secret files, never a secret."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from services.cli import notify
from services.cli.main import build_parser
from services.notify import config

FILE = """
providers:
- name: ops
  type: webhook
  url: https://hooks.example.com/x
  secretFile: /etc/driftbus/key
- name: chat
  type: slack
  urlFile: /etc/driftbus/slack-url
- name: gh
  type: github
  tokenFile: /etc/driftbus/token
alerts:
- providers: [ops, chat, gh]
  bundles: ["team-a/*"]
"""


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["notify", *argv])


def test_a_tenant_file_reaching_further_is_refused_before_any_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "n.yaml"
    # a tenant names its secret files relative to its own directory
    tenant_file = FILE.replace("/etc/driftbus/", "")
    f.write_text(tenant_file.replace("team-a/*", "team-b/*"))
    # no NATS runs at this URL: the refusal comes first
    args = parse("apply", str(f), "--tenant", "team-a", "--nats-url", "nats://127.0.0.1:1")
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"driftbus notify apply: {f}:14: alerts[0]: bundles 'team-b/*' reaches")


def test_a_tenant_file_naming_a_secret_file_outside_its_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "n.yaml"
    f.write_text(FILE)  # absolute paths: the platform's files, say
    args = parse("apply", str(f), "--tenant", "team-a", "--nats-url", "nats://127.0.0.1:1")
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert "a tenant names its secret files relative to its own directory" in err, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["apply"], "name the notifications file"),
        (["show", "x.yaml"], "takes no file"),
        (["run", "x.yaml"], "unexpected argument"),
    ],
)
def test_misused_actions_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(*argv)
    assert args.func(args) == 1
    assert message in capsys.readouterr().err


def test_show_names_targets_and_secret_files(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config.load(FILE, "n.yaml")
    notify.show({"": cfg, "team-a": cfg}, "table")
    out = capsys.readouterr().out
    assert "(platform)" in out
    assert "team-a" in out
    assert "urlFile /etc/driftbus/slack-url" in out
    assert "/etc/driftbus/key" in out
    assert "https://api.github.com (repository of the bundle source)" in out
    notify.show({"team-a": cfg}, "json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["configurations"][0]["key"] == "tenant.team-a"
    assert (
        doc["configurations"][0]["config"]["providers"][1]["urlFile"] == "/etc/driftbus/slack-url"
    )
    notify.show({}, "table")
    assert "no notifications configured" in capsys.readouterr().out


async def test_a_message_whose_secret_cannot_be_read_is_tried_again(tmp_path: Path) -> None:
    """The gate counts a message only once it is on its way: a missing urlFile is logged, and
    the same status sent once the file is there (not dropped as already sent)."""
    import aiohttp

    from schemas.notify import EventKind
    from services.notify.events import Event
    from services.notify.gate import Verdict
    from services.notify.send import RetryPolicy
    from services.notify.service import Notifier

    url = tmp_path / "url"
    cfg = config.load(
        f"providers:\n- name: chat\n  type: slack\n  urlFile: {url}\n"
        "alerts:\n- providers: [chat]\n",
        "n.yaml",
    )
    ready = Event(EventKind.READY, "web", "r1", cluster="c")
    async with aiohttp.ClientSession() as session:
        n = Notifier(session=session, policy=RetryPolicy(attempts=1), timeout=1.0)
        n.configure("platform", cfg)
        assert n.handle(ready) == [("platform/chat", Verdict.SEND)]
        assert n.configured["platform"].outboxes == {}  # nothing could be made
        url.write_text("http://127.0.0.1:1/hook\n")  # nothing listens: delivery fails, fine
        assert n.handle(ready) == [("platform/chat", Verdict.SEND)]
        assert list(n.configured["platform"].outboxes) == ["chat"]
        assert n.handle(ready) == [("platform/chat", Verdict.UNCHANGED)]
        await n.close()
