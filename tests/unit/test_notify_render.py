"""The requests each provider documents, the webhook signature and the retry rule (pure parts
of services/notify)."""

from __future__ import annotations

import json

import pytest

from schemas.notify import EventKind, Provider, ProviderType
from services.notify import render
from services.notify.events import Event
from services.notify.render import Secrets
from services.notify.send import RetryPolicy, read_secrets, retry_delay

SHA = "0123456789abcdef0123456789abcdef01234567"
GIT = Event(
    EventKind.READY,
    "team-a/web",
    SHA,
    cluster="prod-1",
    detail="Ready",
    source=f"https://github.com/acme/shop.git@{SHA} [rendered: kustomize]",
)


def test_the_signature_is_the_hmac_sha256_of_the_body_in_hex() -> None:
    # RFC 4231-style known vector (Wikipedia's HMAC_SHA256("key", "The quick brown fox…"))
    got = render.sign(b"key", b"The quick brown fox jumps over the lazy dog")
    assert got == "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"


def test_a_webhook_gets_the_event_signed() -> None:
    p = Provider(name="hook", type=ProviderType.WEBHOOK, url="http://127.0.0.1:9/x")
    req = render.render(p, GIT, Secrets(key=b"s3cret"))
    assert req is not None
    assert req.url == "http://127.0.0.1:9/x"
    assert req.headers["X-Driftbus-Signature"] == render.sign(b"s3cret", req.body)
    assert req.headers["X-Driftbus-Event"] == "Ready"
    body = json.loads(req.body)
    assert body["bundle"] == "team-a/web"
    assert body["tenant"] == "team-a"
    assert body["kind"] == "Ready"
    assert body["cluster"] == "prod-1"
    assert body["revision"] == SHA
    unsigned = render.render(p, GIT, Secrets())
    assert unsigned is not None
    assert "X-Driftbus-Signature" not in unsigned.headers


def test_slack_gets_text_and_blocks_with_its_escapes() -> None:
    p = Provider(name="chat", type=ProviderType.SLACK, url_file="/u")
    e = Event(EventKind.FAILED, "web", "r1", cluster="c", message="a <b> & c")
    req = render.render(p, e, Secrets(url="https://hooks.slack.com/services/T/B/X"))
    assert req is not None
    assert req.url == "https://hooks.slack.com/services/T/B/X"
    body = json.loads(req.body)
    assert body["text"] == "web r1 in c: Failed"
    assert body["blocks"][0] == {
        "type": "section",
        "text": {"type": "mrkdwn", "text": "*web r1 in c: Failed*"},
    }
    assert body["blocks"][1]["text"]["text"] == "a &lt;b&gt; &amp; c"
    assert body["blocks"][2]["type"] == "context"
    assert "hooks.slack.com" not in req.what
    assert "hooks.slack.com" not in repr(req)


def test_teams_gets_one_adaptive_card() -> None:
    p = Provider(name="t", type=ProviderType.TEAMS, url_file="/u")
    req = render.render(p, GIT, Secrets(url="https://example.webhook.office.com/x"))
    assert req is not None
    body = json.loads(req.body)
    assert body["type"] == "message"
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    assert card["body"][0]["text"] == GIT.title()
    assert card["body"][0]["color"] == "Good"
    assert {"title": "Cluster", "value": "prod-1"} in card["body"][-1]["facts"]


@pytest.mark.parametrize(
    ("kind", "state"),
    [
        (EventKind.PROGRESSING, "pending"),
        (EventKind.PRUNE_HELD, "pending"),  # the deploy waits for someone to approve
        (EventKind.READY, "success"),
        (EventKind.FAILED, "failure"),
        (EventKind.DEGRADED, "failure"),
    ],
)
def test_github_gets_a_commit_status(kind: EventKind, state: str) -> None:
    p = Provider(name="gh", type=ProviderType.GITHUB, token_file="/t", target_url="https://ui/x")
    e = Event(kind, "team-a/web", SHA, cluster="prod-1", source=GIT.source, message="m" * 300)
    req = render.render(p, e, Secrets(token="ghp_x"))
    assert req is not None
    assert req.url == f"https://api.github.com/repos/acme/shop/statuses/{SHA}"
    assert req.headers["Authorization"] == "Bearer ghp_x"
    assert req.headers["Accept"] == "application/vnd.github+json"
    body = json.loads(req.body)
    assert body["state"] == state
    assert body["context"] == "driftbus/prod-1/team-a/web"
    assert body["target_url"] == "https://ui/x"
    assert len(body["description"]) == 140
    assert "ghp_x" not in req.what


def test_github_enterprise_and_a_named_repository() -> None:
    p = Provider(
        name="gh",
        type=ProviderType.GITHUB,
        token_file="/t",
        api_url="https://ghe.example.com/api/v3/",
        repository="ops/deploy",
        context="deploy/prod",
    )
    req = render.render(p, GIT, Secrets(token="t"))
    assert req is not None
    assert req.url == f"https://ghe.example.com/api/v3/repos/ops/deploy/statuses/{SHA}"
    assert json.loads(req.body)["context"] == "deploy/prod"


@pytest.mark.parametrize(
    ("kind", "state"),
    [
        (EventKind.PROGRESSING, "running"),
        (EventKind.PRUNE_HELD, "running"),
        (EventKind.READY, "success"),
        (EventKind.FAILED, "failed"),
        (EventKind.DEGRADED, "failed"),
    ],
)
def test_gitlab_gets_a_commit_status(kind: EventKind, state: str) -> None:
    p = Provider(name="gl", type=ProviderType.GITLAB, token_file="/t")
    e = Event(kind, "web", SHA, cluster="c", source=f"git@gitlab.com:group/sub/shop.git@{SHA}")
    req = render.render(p, e, Secrets(token="glpat"))
    assert req is not None
    assert req.url == f"https://gitlab.com/api/v4/projects/group%2Fsub%2Fshop/statuses/{SHA}"
    assert req.headers["PRIVATE-TOKEN"] == "glpat"
    body = json.loads(req.body)
    assert (body["state"], body["name"]) == (state, "driftbus/c/web")


def test_gitlab_by_project_id_on_a_self_hosted_instance() -> None:
    p = Provider(
        name="gl",
        type=ProviderType.GITLAB,
        token_file="/t",
        api_url="https://git.example.com/api/v4",
        repository="42",
    )
    req = render.render(p, GIT, Secrets(token="t"))
    assert req is not None
    assert req.url == f"https://git.example.com/api/v4/projects/42/statuses/{SHA}"


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(Event(EventKind.READY, "web", "r1", cluster="c", source="dir"), id="not-git"),
        pytest.param(
            Event(EventKind.READY, "web", SHA, cluster="c", source=f"https://x/a/b@{'f' * 40}"),
            id="source-of-another-commit",
        ),
        pytest.param(
            Event(EventKind.DRIFT_CORRECTED, "web", SHA, cluster="c", source=GIT.source),
            id="drift-is-not-about-the-commit",
        ),
        pytest.param(
            Event(EventKind.ROLLOUT_STEP, "web", SHA, source=GIT.source), id="rollout-no-cluster"
        ),
    ],
)
def test_no_commit_status_for_what_is_not_a_commits_state(event: Event) -> None:
    for t in (ProviderType.GITHUB, ProviderType.GITLAB):
        assert render.render(Provider(name="p", type=t, token_file="/t"), event, Secrets()) is None


def test_github_needs_owner_and_repo() -> None:
    e = Event(EventKind.READY, "web", SHA, cluster="c", source=f"/srv/git/shop@{SHA}")
    p = Provider(name="p", type=ProviderType.GITHUB, token_file="/t")
    assert render.render(p, e, Secrets()) is None  # /srv/git/shop is no OWNER/REPO


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("https://github.com/acme/shop.git", "acme/shop"),
        ("https://user@github.com/acme/shop", "acme/shop"),
        ("https://git.example.com:8443/g/p.git?x=1", "g/p"),
        ("ssh://git@github.com/acme/shop.git", "acme/shop"),
        ("git@github.com:acme/shop.git", "acme/shop"),
        ("git@gitlab.com:g/sub/p.git", "g/sub/p"),
        ("/srv/git/shop", "srv/git/shop"),
    ],
)
def test_the_repository_of_a_git_url(url: str, path: str) -> None:
    assert render.repository_path(url) == path


@pytest.mark.parametrize(
    ("status", "headers", "attempt", "wait"),
    [
        (None, {}, 1, 1.0),  # no answer: backoff
        (None, {}, 3, 4.0),
        (500, {}, 2, 2.0),
        (503, {}, 10, None),  # tries run out
        (502, {}, 8, None),
        (429, {"Retry-After": "7"}, 1, 7.0),
        (429, {"Retry-After": "9999"}, 1, 300.0),  # at most max_wait
        (429, {}, 2, 2.0),  # no Retry-After: backoff
        (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 1, 0.0),  # a date passed
        (400, {}, 1, None),
        (401, {}, 1, None),
        (404, {}, 1, None),
    ],
)
def test_when_a_request_is_tried_again(
    status: int | None, headers: dict[str, str], attempt: int, wait: float | None
) -> None:
    policy = RetryPolicy(attempts=8, base=1.0, cap=60.0, max_wait=300.0)
    assert retry_delay(status, headers, attempt, policy) == wait


def test_backoff_is_capped() -> None:
    assert retry_delay(500, {}, 9, RetryPolicy(attempts=20, base=1.0, cap=30.0)) == 30.0


def test_secrets_are_read_from_their_files_and_never_shown(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    (d / "url").write_text("https://hooks.example/secret-path\n")
    (d / "key").write_bytes(b"k3y\n")
    p = Provider(
        name="h", type=ProviderType.WEBHOOK, url_file=str(d / "url"), secret_file=str(d / "key")
    )
    s = read_secrets(p)
    assert (s.url, s.key) == ("https://hooks.example/secret-path", b"k3y")
    assert "secret-path" not in repr(s)
    assert "k3y" not in repr(s)
    missing = Provider(name="h", type=ProviderType.WEBHOOK, url_file=str(d / "nope"))
    with pytest.raises(OSError, match=r"provider h: urlFile .*nope cannot be read"):
        read_secrets(missing)
