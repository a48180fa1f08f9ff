"""The stack `driftbus up` runs is closed to other local processes (issue 30, item 6), black-box:
one real `up --detach` (nats-server, etcd, kube-apiserver, the services, the page), probed as a
stranger on the same machine would — and used, through its context, as its owner would."""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from services.controlplane import servers

pytestmark = pytest.mark.integration
SECRET = "Secret/hello/credentials"
TENANTS = Path(__file__).resolve().parents[2] / "deploy" / "tenants" / "tenants.yaml"


async def driftbus(*args: str, within: float = 240) -> tuple[int, str]:
    """``driftbus ARGS`` as the owner types it in another terminal: no NATS_URL, no
    credentials in the environment, only the context `up` wrote."""
    env = {
        k: v for k, v in os.environ.items() if k != "NATS_URL" and not k.startswith("DRIFTBUS_NATS")
    }
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    out, _ = await asyncio.wait_for(p.communicate(), timeout=within)
    assert p.returncode is not None
    return p.returncode, out.decode()


@pytest.fixture(scope="module")
async def up(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("closed") / "up"
    port = servers.free_port()
    code, out = await driftbus(
        "up", "--detach", "--workdir", str(workdir), "--ui-port", str(port), "-o", "json",
        "--no-controllers",  # the example has no workload; the CPU is shared
    )  # fmt: skip
    assert code == 0, out
    info: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    info["ui_port"] = port
    try:
        yield info
    finally:
        code, out = await driftbus("down", "--workdir", str(workdir))
        assert code == 0, out
        assert servers.orphans(str(workdir)) == []


def _port(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


async def test_a_stranger_cannot_publish_a_bundle_on_the_up_bus(up: dict[str, Any]) -> None:
    """Today's failure: an anonymous nats-py client's publish to a bundle subject of the `up`
    stack was accepted (a platform bundle, applied with the kubeconfig's rights)."""
    port = _port(up["nats_url"])
    attempts: list[str] = []
    auth = json.loads(await asyncio.to_thread(Path(up["context"]).read_text))["nats_auth"]
    stolen_cert = ssl.create_default_context(cafile=auth["nats_ca"])
    stolen_cert.load_cert_chain(auth["nats_cert"], auth["nats_key"])
    for url, tls in (
        (f"nats://127.0.0.1:{port}", None),  # plain text, no credentials
        (f"tls://127.0.0.1:{port}", _trust_anything()),  # TLS, no client certificate
        (f"tls://127.0.0.1:{port}", stolen_cert),  # the stack's own client pair, no password
    ):
        try:
            nc = await nats.connect(
                url, tls=tls, connect_timeout=3, max_reconnect_attempts=0, allow_reconnect=False
            )
        except Exception as exc:  # noqa: BLE001 - refused: TLS required, certificate, auth
            attempts.append(f"{url}: refused ({type(exc).__name__}: {exc})")
            continue
        try:
            ack = await nc.jetstream(timeout=3).publish(
                "driftbus.bundle.local.=.stranger", b"{}", timeout=3
            )
            attempts.append(f"{url}: ACCEPTED {ack}")
        except Exception as exc:  # noqa: BLE001 - refused by permissions
            attempts.append(f"{url}: publish refused ({type(exc).__name__})")
        finally:
            await nc.close()
    print("\n".join(attempts))
    assert not [a for a in attempts if "ACCEPTED" in a], attempts


def _trust_anything() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _stack_pids(up: dict[str, Any]) -> dict[int, str]:
    """Every process of the stack (its servers, `up`, the services) and its command line."""
    pids = {int(line.split(" ", 1)[0]) for line in servers.orphans(up["workdir"])}
    pids |= {up["pid"], *up["services"].values()}
    out = {}
    for pid in pids:
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return out


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket the processes ``pids`` listen on (from /proc)."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir() if fd_dir.exists() else ():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if m := re.fullmatch(r"socket:\[(\d+)\]", target):
                inodes.add(m.group(1))
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            addr_hex, port_hex = cols[1].split(":")
            raw = bytes.fromhex(addr_hex)
            if width == 8:
                addr = ".".join(str(b) for b in reversed(raw))
            else:  # four little-endian 32-bit words
                words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
                addr = ":".join(b"".join(words).hex()[i : i + 4] for i in range(0, 32, 4))
            found.append((addr, int(port_hex, 16)))
    return found


async def test_etcd_refuses_a_client_without_its_certificate_and_nothing_listens_beyond_loopback(
    up: dict[str, Any],
) -> None:
    """Today's failure: etcd of `up` served plain HTTP to anyone on loopback (a local process
    could read every Secret in the cluster's storage, or write any object)."""
    pids = _stack_pids(up)
    (apiserver,) = [c for c in pids.values() if "kube-apiserver" in c]
    etcd_url = re.search(r"--etcd-servers=(\S+)", apiserver)
    assert etcd_url, apiserver
    port = _port(etcd_url.group(1))
    for url, ctx in (
        (f"http://127.0.0.1:{port}/v3/kv/range", None),
        (f"https://127.0.0.1:{port}/v3/kv/range", _trust_anything()),
    ):
        body = await asyncio.to_thread(_etcd_range, url, ctx)
        assert body is None, f"etcd answered {url} without a client certificate: {body!r}"
    listening = _listening(set(pids))
    assert listening, pids
    loopback = ("127.0.0.1", "0000:0000:0000:0000:0000:0000:0000:0001")
    wide = [(a, p) for a, p in listening if a not in loopback]
    assert not wide, f"listening beyond loopback: {wide}"


def _etcd_range(url: str, ctx: ssl.SSLContext | None) -> bytes | None:
    """What etcd answers a read of every key with no client certificate; None: refused."""
    all_keys = b'{"key":"AA==","range_end":"AA=="}'
    req = urllib.request.Request(url, data=all_keys, method="POST")  # noqa: S310 - loopback
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:  # noqa: S310
            return bytes(resp.read()[:300])
    except (urllib.error.URLError, ssl.SSLError, ConnectionError) as exc:
        print(f"{url}: refused ({exc})")
        return None


def _get(
    url: str, *, host: str | None = None, cookie: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Host": host} if host else {}
    if cookie:
        headers["Cookie"] = cookie

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        req = urllib.request.Request(url, headers=headers)  # noqa: S310 - loopback
        with opener.open(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


async def test_the_page_wants_its_token_and_its_own_host_name(up: dict[str, Any]) -> None:
    """Today's failure: the page answered anyone, and `Host: attacker.example` with 200."""
    base = f"http://127.0.0.1:{up['ui_port']}"
    for path in ("/", "/api/state", "/events", "/static/app.js"):
        code, _, body = await asyncio.to_thread(_get, base + path)
        assert code == 401, (path, code, body[:200])
    token_url = up["ui"]
    assert token_url.startswith(f"{base}/?token="), token_url
    token = _token(up)
    code, _, _ = await asyncio.to_thread(_get, f"{base}/api/state?token=wrong")
    assert code == 401
    # DNS rebinding: the right token does not help under another name
    code, _, body = await asyncio.to_thread(_get, token_url, host="attacker.example")
    assert code == 403, (code, body[:200])
    code, _, _ = await asyncio.to_thread(
        _get, f"{base}/api/state?token={token}", host=f"attacker.example:{up['ui_port']}"
    )
    assert code == 403
    # the printed address: a cookie, and the token leaves the address bar
    code, headers, _ = await asyncio.to_thread(_get, token_url)
    assert code == 302, headers
    assert "token" not in headers["Location"], headers
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    assert "HttpOnly" in headers["Set-Cookie"], headers
    assert "SameSite=Strict" in headers["Set-Cookie"], headers
    for host in (None, f"localhost:{up['ui_port']}"):
        code, _, body = await asyncio.to_thread(_get, f"{base}/", host=host, cookie=cookie)
        assert code == 200, (host, code)
        assert b"<html" in body.lower()


def _token(up: dict[str, Any]) -> str:
    return str(up["ui"]).partition("token=")[2]


def _page_json(up: dict[str, Any], path: str) -> tuple[int, Any]:
    token = _token(up)
    sep = "&" if "?" in path else "?"
    code, _, body = _get(f"http://127.0.0.1:{up['ui_port']}{path}{sep}token={token}")
    return code, json.loads(body) if code == 200 else body.decode()


async def test_the_page_filters_every_endpoint_by_tenant_and_shows_no_sha_of_a_secret(
    up: dict[str, Any],
) -> None:
    """Today's failures: ``?tenant=`` was ignored by /api/object and /api/bundle, and every
    Secret's ``manifest_sha`` (an unsalted hash of its values) was served."""
    obj = "/api/object?cluster=local&bundle=hello&kind=Secret&namespace=hello&name=credentials"
    bundle = "/api/bundle?cluster=local&bundle=hello"
    for path in (obj, bundle):
        code, doc = await asyncio.to_thread(_page_json, up, path)
        assert code == 200, doc
        code, doc = await asyncio.to_thread(_page_json, up, f"{path}&tenant=team-x")
        assert code == 404, f"{path} shows the platform's bundle to tenant team-x: {doc}"
    # an object's history is keyed by the object alone: asked through a bundle of team-x, the
    # platform Secret's decisions and last error are not team-x's to read (found in review)
    through = obj.replace("bundle=hello", "bundle=team-x/app") + "&tenant=team-x"
    code, doc = await asyncio.to_thread(_page_json, up, through)
    assert code == 200, doc
    assert doc["decisions"] == [], doc
    assert doc["last_error"] is None, doc
    code, state = await asyncio.to_thread(_page_json, up, "/api/state?tenant=team-x")
    assert code == 200, state
    assert not state["bundles"], state
    assert not state["objects"], state

    # the owner's own CLI still sees the Secret's SHAs (through the context): the page must not
    code, out = await driftbus("why", SECRET, "--cluster", "local", "-o", "json")
    assert code == 0, out
    shas = set(re.findall(r"[0-9a-f]{64}", out))
    assert shas, out
    served = []
    for path in ("/api/state", obj):
        code, doc = await asyncio.to_thread(_page_json, up, path)
        assert code == 200
        served.append(json.dumps(doc))
    rows = [o for objs in json.loads(served[0])["objects"].values() for o in objs]
    (secret_row,) = [o for o in rows if o["object"] == SECRET]
    assert not {k for k in secret_row if k.endswith("_sha")}, secret_row
    assert json.loads(served[1])["decisions"], served[1]
    leaked = [s for s in shas if any(s in text for text in served)]
    assert not leaked, f"the page serves the Secret's SHAs {leaked}"


async def test_the_owner_s_commands_work_through_the_context(
    up: dict[str, Any], tmp_path: Path
) -> None:
    """Closing the bus must not close it to its owner: every command finds the stack and its
    operator credentials in the context (no NATS_URL, no exports)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: closed\n  namespace: default\n"
        "data:\n  a: '1'\n"
    )
    steps = [
        ("publish", str(src), "--bundle", "closed", "--wait", "--timeout", "120"),
        ("status", "--bundle", "closed"),
        ("bundles",),
        ("why", "ConfigMap/default/closed"),
        ("plan", str(src), "--bundle", "closed"),
        ("suspend", "closed"),
        ("resume", "closed"),
        ("rollback", "hello"),  # no revision before: refused by the planner (exit 1)
        ("tenants", "apply", str(TENANTS)),  # the admin's alone
        ("tenants", "show"),
        ("shards",),
    ]
    for step in steps:
        code, out = await driftbus(*step, within=180)
        assert code == (1 if step[0] == "rollback" else 0), f"driftbus {' '.join(step)}: {out}"
        if step[0] == "rollback":  # the planner's answer came back on the operator's inbox
            assert "timed out" not in out.lower(), out
            print(out)
        assert "Traceback" not in out, out
        assert "ermission" not in out, out
    code, out = await driftbus("bundles", "-o", "json")
    assert {b["bundle"] for b in json.loads(out)} >= {"hello", "closed"}, out
    # and no service, nor the page, needed more than its role grants
    logs = await asyncio.to_thread(_logs, up)
    assert len(logs) >= 6, list(logs)
    for log, text in logs.items():
        assert "iolation" not in text, f"{log}: {text[-3000:]}"


def _logs(up: dict[str, Any]) -> dict[Path, str]:
    """nats-server's log and every service's."""
    found = [*Path(up["workdir"], "nats").rglob("*.log"), *Path(up["logs"]).rglob("*.log")]
    return {p: p.read_text(errors="replace") for p in found}
