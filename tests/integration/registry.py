"""The real CNCF distribution registry (v3, built from its pinned Go module like the other
servers) on a loopback port, for the OCI tests: storage on the filesystem under a temporary
directory, plain HTTP (loopback), optionally behind ``auth: htpasswd``.

With ``auth``, the registry is given an htpasswd path that does not exist: distribution then
writes one itself with the user ``docker`` and a random password (bcrypt, which neither Python's
standard library nor this project's dependencies can make), and logs the password once; the
helper reads it from the log. So the credentials are the registry's own, checked by its own
bcrypt.

With ``token_realm``, the registry takes bearer tokens (``auth: token``): JWTs an issuer signs
with a key its ``jwks`` file lists; ``TokenService`` is such an issuer (RS256, from
``cryptography``), a stand-in for docker_auth or a cloud registry's token endpoint.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from services.common import binaries
from services.controlplane.servers import Process, ServerError, free_port, log_tail

TOKEN_SERVICE = "driftbus-registry"
TOKEN_ISSUER = "driftbus-test-issuer"


@dataclasses.dataclass
class Registry:
    workdir: Path
    auth: bool = False
    token_realm: str = ""
    """Set: ``auth: token`` — bearer tokens from this realm, signed by a key of ``jwks``."""
    jwks: Path | None = None
    port: int = 0
    username: str = ""
    password: str = ""
    process: Process | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def storage(self) -> Path:
        return self.workdir / "storage"

    def start(self) -> None:
        self.port = free_port()
        config = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "json"},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}},
            "http": {"addr": self.host, "secret": "driftbus-test-upload-secret"},
        }
        if self.token_realm:
            config["auth"] = {
                "token": {
                    "realm": self.token_realm,
                    "service": TOKEN_SERVICE,
                    "issuer": TOKEN_ISSUER,
                    "jwks": str(self.jwks),
                }
            }
        elif self.auth:
            config["auth"] = {
                "htpasswd": {"realm": "driftbus-test", "path": str(self.workdir / "htpasswd")}
            }
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "config.yml"
        path.write_text(json.dumps(config))  # JSON is YAML
        name = (
            "registry-token" if self.token_realm else "registry-auth" if self.auth else "registry"
        )
        self.process = Process(
            name, [str(binaries.require("registry")), "serve", str(path)], self.workdir
        )
        self.process.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise self.process.failure("exited before it listened")
            lines = self._log_lines()
            if self.auth and not self.password:
                for line in lines:
                    if line.get("user") == "docker" and line.get("password"):
                        self.username, self.password = "docker", str(line["password"])
            listening = any(str(line.get("msg", "")).startswith("listening on") for line in lines)
            if listening and (not self.auth or self.password):
                return
            time.sleep(0.1)
        raise ServerError(f"registry did not start:\n{log_tail(self.process.log_path)}")

    def _log_lines(self) -> list[dict[str, object]]:
        assert self.process is not None
        out = []
        try:
            text = self.process.log_path.read_text()
        except FileNotFoundError:
            return []
        for line in text.splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator[Registry]:
        """The registry started, stopped on leaving (a module's fixture)."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def blobs(self) -> Iterator[Path]:
        """Every blob's data file in the registry's storage."""
        yield from (self.storage / "docker/registry/v2/blobs").rglob("data")

    def blob_path(self, digest: str) -> Path:
        hexa = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"

    def logs(self) -> str:
        return log_tail(self.process.log_path) if self.process else ""


class TokenService:
    """A token endpoint on loopback: ``GET /token?service=…&scope=repository:NAME:ACTIONS``
    with HTTP basic credentials answers ``{"token": JWT}`` granting the scope; wrong or missing
    credentials get 401. ``requests`` records each (user, scope) asked."""

    def __init__(self, workdir: Path, username: str, password: str) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.username, self.password = username, password
        self.requests: list[tuple[str, str]] = []
        self.spoil = 0
        """How many of the next tokens are signed with a key the registry does not trust (as a
        token that expired is refused): each refused by the registry, not by this service."""
        numbers = self.key.public_key().public_numbers()
        self.jwks = workdir / "jwks.json"
        workdir.mkdir(parents=True, exist_ok=True)
        self.jwks.write_text(
            json.dumps(
                {
                    "keys": [
                        {
                            "kty": "RSA",
                            "kid": "driftbus-test",
                            "alg": "RS256",
                            "use": "sig",
                            "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8)),
                            "e": _b64(numbers.e.to_bytes(3)),
                        }
                    ]
                }
            )
        )
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def realm(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def token(self, scope: str) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        now = int(time.time())
        claims = {
            "iss": TOKEN_ISSUER,
            "sub": self.username,
            "aud": TOKEN_SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": f"{now}-{len(self.requests)}",
            "access": [{"type": kind, "name": name, "actions": actions.split(",")}],
        }
        kid = "driftbus-test"
        if self.spoil > 0:
            self.spoil, kid = self.spoil - 1, "unknown-key"
        header = {"alg": "RS256", "typ": "JWT", "kid": kid}
        signed = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{_b64(signature)}"

    def start(self) -> None:
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                scope = query.get("scope", [""])[0]
                given = self.headers.get("Authorization", "").removeprefix("Basic ")
                user, _, password = base64.b64decode(given).decode().partition(":")
                service.requests.append((user, scope))
                if (user, password) != (service.username, service.password) or not scope:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": service.token(scope)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
