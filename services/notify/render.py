"""The HTTP request each provider type documents, made from an event (pure).

- ``webhook``: the event as JSON; with a key, ``X-Driftbus-Signature: sha256=<hex>``, the
  HMAC-SHA256 of the exact body (GitHub's webhook convention), ``X-Driftbus-Event: <kind>``.
- ``slack``: an incoming webhook message, ``{"text": ..., "blocks": [...]}`` (``text`` is the
  notification's fallback, the blocks its layout).
- ``teams``: a Workflows incoming webhook message carrying one Adaptive Card (1.4).
- ``github``: ``POST {apiUrl}/repos/{owner}/{repo}/statuses/{sha}`` with ``state``
  (pending, success, failure), ``description`` (≤ 140 characters), ``context``, ``target_url``;
  ``Authorization: Bearer``, ``Accept: application/vnd.github+json``.
- ``gitlab``: ``POST {apiUrl}/api/v4/projects/{id or url-encoded path}/statuses/{sha}`` with
  ``state`` (running, success, failed), ``name``, ``description``, ``target_url``;
  ``PRIVATE-TOKEN``.

A commit status is sent only for a bundle published from Git: its revision is the commit and its
source reads ``URL@<commit>`` (``services.inputs.git``); other events (drift, rollouts) and
other bundles give no request (``None``). Secrets arrive in ``Secrets``, read by the shell; a
request's ``what`` names it for logs without any of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
from typing import Any, Final

import msgspec

from schemas.notify import EventKind, Provider, ProviderType
from services.notify.events import Event

DESCRIPTION_MAX: Final = 140
"""GitHub refuses a longer commit status description; GitLab shows the same."""
_COMMIT: Final = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
_GITHUB_STATE: Final = {
    EventKind.PROGRESSING: "pending",
    EventKind.PRUNE_HELD: "pending",
    EventKind.READY: "success",
    EventKind.FAILED: "failure",
    EventKind.DEGRADED: "failure",
}
_GITLAB_STATE: Final = {
    EventKind.PROGRESSING: "running",
    EventKind.PRUNE_HELD: "running",
    EventKind.READY: "success",
    EventKind.FAILED: "failed",
    EventKind.DEGRADED: "failed",
}
_COLOUR: Final = {
    EventKind.READY: "Good",
    EventKind.FAILED: "Attention",
    EventKind.DEGRADED: "Warning",
    EventKind.PRUNE_HELD: "Warning",
    EventKind.DRIFT_CORRECTED: "Warning",
}
USER_AGENT: Final = "driftbus-notify"


@dataclasses.dataclass(frozen=True)
class Secrets:
    """What a provider's files hold, read when a message is sent."""

    url: str = ""
    token: str = ""
    key: bytes = b""

    def __repr__(self) -> str:  # never in a log line or traceback
        return "Secrets(…)"


@dataclasses.dataclass(frozen=True)
class Request:
    url: str
    headers: dict[str, str]
    body: bytes
    what: str
    """The provider and target, for logs: no URL of a chat webhook, no token."""

    def __repr__(self) -> str:
        return f"Request({self.what})"


def sign(key: bytes, body: bytes) -> str:
    """The ``X-Driftbus-Signature`` of ``body``: ``sha256=`` and the HMAC-SHA256 in hex."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def event_document(e: Event) -> dict[str, Any]:
    """The webhook's JSON body."""
    return {
        "kind": str(e.kind),
        "bundle": e.bundle,
        "tenant": e.tenant,
        "cluster": e.cluster,
        "clusters": list(e.where),
        "revision": e.revision,
        "detail": e.detail,
        "object": e.object,
        "message": e.message,
        "source": e.source,
        "at": e.at.isoformat() if e.at else None,
        "title": e.title(),
    }


def _json(value: Any) -> bytes:
    return msgspec.json.encode(value)


def _mrkdwn(text: str) -> str:
    """Slack's three escapes (``&``, ``<``, ``>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(e: Event) -> dict[str, Any]:
    title = e.title()
    facts = [f"bundle *{_mrkdwn(e.bundle)}*", f"revision `{_mrkdwn(e.revision[:12])}`"]
    if e.where:
        facts.append("cluster " + ", ".join(f"`{_mrkdwn(c)}`" for c in e.where))
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{_mrkdwn(title)}*"}}
    ]
    if e.message:
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(e.message[:2900])}}
        )
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(facts)}]})
    return {"text": title, "blocks": blocks}


def teams(e: Event) -> dict[str, Any]:
    facts = [{"title": "Bundle", "value": e.bundle}, {"title": "Revision", "value": e.revision}]
    if e.where:
        facts.append({"title": "Cluster", "value": ", ".join(e.where)})
    if e.object:
        facts.append({"title": "Object", "value": e.object})
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": e.title(),
            "weight": "Bolder",
            "wrap": True,
            "color": _COLOUR.get(e.kind, "Default"),
        }
    ]
    if e.message:
        body.append({"type": "TextBlock", "text": e.message, "wrap": True})
    body.append({"type": "FactSet", "facts": facts})
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    }
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card,
            }
        ],
    }


def commit_of(e: Event) -> tuple[str, str] | None:
    """(repository URL, commit) of an event about a bundle published from Git, else None."""
    if not _COMMIT.match(e.revision):
        return None
    source = e.source.split(" [rendered: ", 1)[0]
    url, at, commit = source.rpartition("@")
    if not at or commit != e.revision or not url:
        return None
    return url, commit


def repository_path(url: str) -> str:
    """``OWNER/REPO`` (or ``GROUP/SUB/PROJECT``) of a Git URL, without ``.git``: from
    ``https://host/a/b.git``, ``ssh://git@host/a/b`` or ``git@host:a/b.git``."""
    if "://" in url:  # scheme://[user@]host[:port]/path
        path = url.split("://", 1)[1].partition("/")[2].split("?")[0].split("#")[0]
    elif ":" in url.split("/", 1)[0]:  # scp-like: [user@]host:path
        path = url.split(":", 1)[1]
    else:
        path = url
    return path.strip("/").removesuffix(".git")


_UNRESERVED: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)


def _percent(text: str) -> str:
    """``text`` percent-encoded whole (a ``/`` too), as GitLab takes a project's path."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode())


def description(e: Event) -> str:
    text = e.title() if not e.message else f"{e.kind}: {e.message}"
    return text if len(text) <= DESCRIPTION_MAX else text[: DESCRIPTION_MAX - 1] + "…"


def commit_status_repository(p: Provider, e: Event) -> str | None:
    """The repository a commit-status provider posts ``e``'s status on (``repository``, else
    the path of the URL the bundle names as its source); None when it posts nothing."""
    if p.type not in (ProviderType.GITHUB, ProviderType.GITLAB) or not e.cluster:
        return None
    states = _GITHUB_STATE if p.type is ProviderType.GITHUB else _GITLAB_STATE
    found = commit_of(e)
    if e.kind not in states or found is None:
        return None
    repo = p.repository or repository_path(found[0])
    if p.type is ProviderType.GITHUB and repo.count("/") != 1:
        return None  # not OWNER/REPO: a local path, or a GitLab group's project
    return repo


def _commit_status(p: Provider, e: Event, s: Secrets) -> Request | None:
    repo = commit_status_repository(p, e)
    found = commit_of(e)
    if repo is None or found is None:
        return None
    sha = found[1]
    state = (_GITHUB_STATE if p.type is ProviderType.GITHUB else _GITLAB_STATE)[e.kind]
    context = p.context or f"driftbus/{e.cluster}/{e.bundle}"
    body: dict[str, Any] = {"state": state, "description": description(e)}
    if p.target_url:
        body["target_url"] = p.target_url
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    if p.type is ProviderType.GITHUB:
        base = (p.api_url or "https://api.github.com").rstrip("/")
        target = f"{base}/repos/{repo}/statuses/{sha}"
        body["context"] = context
        headers |= {
            "Authorization": f"Bearer {s.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
    else:
        base = (p.api_url or "https://gitlab.com").rstrip("/").removesuffix("/api/v4")
        project = repo if repo.isdigit() else _percent(repo)
        target = f"{base}/api/v4/projects/{project}/statuses/{sha}"
        body["name"] = context
        headers["PRIVATE-TOKEN"] = s.token
    what = f"{p.type} provider {p.name} ({repo}@{sha[:12]} {state})"
    return Request(target, headers, _json(body), what)


def render(p: Provider, e: Event, s: Secrets) -> Request | None:
    """The request telling ``p`` of ``e``; None when ``p`` has nothing to say about it."""
    if p.type in (ProviderType.GITHUB, ProviderType.GITLAB):
        return _commit_status(p, e, s)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    what = f"{p.type} provider {p.name}"
    if p.type is ProviderType.SLACK:
        return Request(s.url, headers, _json(slack(e)), what)
    if p.type is ProviderType.TEAMS:
        return Request(s.url, headers, _json(teams(e)), what)
    body = _json(event_document(e))
    headers["X-Driftbus-Event"] = str(e.kind)
    if s.key:
        headers["X-Driftbus-Signature"] = sign(s.key, body)
    return Request(p.url or s.url, headers, body, what)
