"""Reading and checking a notifications file, and where it is kept on the bus (pure): each
configuration a ``services.stored`` document, checked for its tenant.

A configuration is the platform's (key ``platform``, may name any bundle) or one tenant's (key
``tenant.<tenant>``, may name only that tenant's bundles). ``load`` refuses, naming the file and
the entry, anything the service could not act on: an unknown key, a provider an alert names but
the file does not define, a secret given inline where a file is required, and — for a tenant's
configuration — a filter that reaches beyond the tenant's own bundles.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Final

from schemas.notify import Alert, NotifyConfig, Provider, ProviderType
from schemas.subjects import SubjectError, decode_token, encode_token
from services.clusters.selector import SelectorError, parse_selector
from services.stored.document import Document, Problem

PLATFORM_KEY: Final = "platform"
TENANT_PREFIX: Final = "tenant."
_TENANT: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_GLOB_CHARS: Final = frozenset("*?[")
_CHAT: Final = (ProviderType.SLACK, ProviderType.TEAMS)
_COMMIT: Final = (ProviderType.GITHUB, ProviderType.GITLAB)


class ConfigError(Problem):
    """A notifications file (or stored configuration) that cannot be used; the message starts
    with where it is and names the entry."""


def key_of(tenant: str) -> str:
    """The bucket key of a configuration: ``platform``, or ``tenant.<tenant>``."""
    if not tenant:
        return PLATFORM_KEY
    if not _TENANT.match(tenant):
        raise ConfigError(f"tenant {tenant!r} must be a DNS label")
    return TENANT_PREFIX + encode_token(tenant)


def tenant_of(key: str) -> str | None:
    """The tenant a key is for ("" the platform's); None for a key that is neither."""
    if key == PLATFORM_KEY:
        return ""
    if key.startswith(TENANT_PREFIX):
        try:
            tenant = decode_token(key.removeprefix(TENANT_PREFIX))
        except SubjectError:
            return None
        return tenant if _TENANT.match(tenant) else None
    return None


def document(tenant: str) -> Document[NotifyConfig]:
    """``tenant``'s configuration ("" the platform's) as a setting: checked for it."""
    key = key_of(tenant)
    return Document(
        kind=NotifyConfig,
        error=ConfigError,
        name="the notifications file",
        keys="providers, alerts, limits",
        stored=f"stored notifications {key}",
        check=functools.partial(check, tenant=tenant),
    )


def load(text: str | bytes, where: str, tenant: str = "") -> NotifyConfig:
    """The configuration of a notifications file (YAML or JSON) named ``where``, for ``tenant``
    ("" the platform); ConfigError if it is not usable or reaches beyond ``tenant``."""
    return document(tenant).load(text, where)


def check(config: NotifyConfig, tenant: str) -> None:
    """Everything ``load`` checks beyond the schema: ConfigError naming the entry."""
    names: set[str] = set()
    for i, p in enumerate(config.providers):
        at = f"providers[{i}] ({p.name})"
        where = ("providers", i)
        if p.name in names:
            raise ConfigError(f"{at}: a second provider of this name", where)
        names.add(p.name)
        problem = provider_problem(p) or (tenant_file_problem(p, tenant) if tenant else "")
        if problem:
            raise ConfigError(f"{at}: {problem}", where)
    for i, a in enumerate(config.alerts):
        at, where = f"alerts[{i}]", ("alerts", i)
        if not a.providers:
            raise ConfigError(f"{at}: names no provider", where)
        for name in a.providers:
            if name not in names:
                raise ConfigError(f"{at}: provider {name!r} is not defined under providers", where)
        try:
            parse_selector(a.cluster_selector)
        except SelectorError as exc:
            raise ConfigError(f"{at}: clusterSelector: {exc}", where) from None
        if tenant:
            problem = reach_problem(a, tenant)
            if problem:
                raise ConfigError(f"{at}: {problem}", where)


def tenant_file_problem(p: Provider, tenant: str) -> str:
    """Why a tenant's provider names a secret file it may not ("" when it may not): a tenant
    names its files relative to its own directory (``tenants/<tenant>/`` under the service's
    secrets directory), never an absolute path or one climbing out with ``..``."""
    for what, path in (("urlFile", p.url_file), ("tokenFile", p.token_file)):
        if path and (Path(path).is_absolute() or ".." in Path(path).parts):
            return (
                f"{what} {path!r}: a tenant names its secret files relative to its own directory "
                f"(tenants/{tenant}/ in the notify service's secrets directory)"
            )
    if p.secret_file and (Path(p.secret_file).is_absolute() or ".." in Path(p.secret_file).parts):
        return (
            f"secretFile {p.secret_file!r}: a tenant names its secret files relative to its own "
            f"directory (tenants/{tenant}/ in the notify service's secrets directory)"
        )
    return ""


def provider_problem(p: Provider) -> str:
    """Why a provider cannot be used as written ("" when it can)."""
    if p.type is ProviderType.WEBHOOK:
        if bool(p.url) == bool(p.url_file):
            return "a webhook takes one of url or urlFile"
        if p.url and not p.url.startswith(("http://", "https://")):
            return "url must be an http:// or https:// address"
    elif p.url:
        if p.type in _CHAT:
            return (
                f"a {p.type} webhook's URL is its credential: put it in a file and name the "
                "file with urlFile"
            )
        return f"a {p.type} provider takes apiUrl, not url"
    if p.type in _CHAT and not p.url_file:
        return f"a {p.type} provider needs urlFile (the file holding its webhook URL)"
    if p.type in _COMMIT:
        if not p.token_file:
            return f"a {p.type} provider needs tokenFile (the file holding its API token)"
        if p.url_file:
            return f"a {p.type} provider takes apiUrl, not urlFile"
        if p.api_url and not p.api_url.startswith(("http://", "https://")):
            return "apiUrl must be an http:// or https:// address"
        if p.type is ProviderType.GITHUB and p.repository and p.repository.count("/") != 1:
            return "repository must be OWNER/REPO"
    else:
        if p.token_file:
            return f"tokenFile is for github and gitlab providers, not {p.type}"
        if p.api_url or p.repository or p.context or p.target_url:
            return (
                f"apiUrl, repository, context and targetUrl are for commit statuses, not {p.type}"
            )
    if p.secret_file and p.type is not ProviderType.WEBHOOK:
        return f"secretFile (an HMAC key) is for webhook providers, not {p.type}"
    return ""


def reach_problem(a: Alert, tenant: str) -> str:
    """Why a tenant's alert could see another tenant's (or the platform's) bundles ("" when it
    cannot): every bundle glob must start with ``<tenant>/``, every tenant glob be the tenant."""
    own = f"{tenant}/"
    for glob in a.bundles:
        head = glob[: len(own)]
        if head != own or _GLOB_CHARS & set(head):
            return (
                f"bundles {glob!r} reaches beyond tenant {tenant}'s own bundles: a tenant's "
                f"alerts may name only bundles {own}NAME (globs after the '/')"
            )
    for glob in a.tenants:
        if glob != tenant:
            return (
                f"tenants {glob!r} reaches beyond tenant {tenant}: a tenant's alerts may name "
                "only its own"
            )
    return ""


def dump(config: NotifyConfig) -> bytes:
    """The configuration as stored on the bus (JSON)."""
    return document("").dump(config)


def decode_stored(data: bytes, key: str) -> NotifyConfig:
    """The configuration stored under ``key``; checked again, so a configuration written past
    ``driftbus notify apply`` still cannot reach beyond its tenant. ConfigError if unusable."""
    tenant = tenant_of(key)
    if tenant is None:
        raise ConfigError(f"notify key {key!r}: neither {PLATFORM_KEY} nor {TENANT_PREFIX}NAME")
    return document(tenant).decode(data)
