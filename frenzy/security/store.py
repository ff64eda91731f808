"""Tokens and tenants, kept in files under the security directory (FRENZY_SECURITY_DIR).

Tokens look like Kubernetes bootstrap tokens, "<id>.<secret>": the id finds the record, the
secret proves it. Three kinds:
  api       a gRPC bearer token for one tenant and role (admin, user); only its SHA-256 is
            stored (the secret has 192 random bits, so a plain hash is enough; no password
            stretching is needed, as for GitHub's or Kubernetes' tokens);
  pipeline  an HMAC key for one tenant's records produced straight onto Kafka. The server needs
            the key itself to check an HMAC, so this secret is stored, in a 0600 file;
  join      what a node agent joins the cluster with (stored, like a bootstrap token's Secret).

Files are written atomically with mode 0600; a reader stats them on every lookup (about a
microsecond) and reloads them when their mtime changes, so `frenzy token create|revoke` takes
effect on a running orchestrator at its next call.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

TOKENS_FILE = "tokens.json"
TENANTS_FILE = "tenants.json"
KINDS = ("api", "pipeline", "join")
ROLES = ("admin", "user")
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Identity:
    """Who a verified caller is."""

    tenant: str
    role: str
    token_id: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass
class TokenRecord:
    id: str
    kind: str
    tenant: str
    role: str = "user"
    secret_sha256: str = ""  # api tokens
    secret: str = ""  # pipeline and join tokens (the server must hold the key)
    created_at_s: float = 0.0
    description: str = ""


@dataclass
class TenantPolicy:
    """A tenant's share and limits. 0 means unlimited."""

    weight: float = 1.0
    max_gpus: int = 0
    max_queued_jobs: int = 0
    # Executables (argv[0]) this tenant's jobs may run besides the reference trainer.
    entrypoints: list[str] = field(default_factory=list)
    requests_per_s: float = 50.0  # token-bucket rate of gRPC calls
    burst: int = 100


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read, atomically (never a moment with wider mode)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def split_token(token: str) -> tuple[str, str]:
    token_id, dot, secret = token.strip().partition(".")
    return (token_id, secret) if dot and token_id and secret else ("", "")


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class SecurityStore:
    """Reads and writes tokens.json and tenants.json in one directory."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._tokens: dict[str, TokenRecord] = {}
        self._tenants: dict[str, TenantPolicy] = {}
        self._mtimes: tuple = ()

    # ----- reading -------------------------------------------------------------------------
    def _mtime(self, name: str) -> tuple[int, int]:
        try:
            found = (self.directory / name).stat()
            return found.st_mtime_ns, found.st_ino  # a replaced file has a new inode
        except FileNotFoundError:
            return 0, 0

    def refresh(self, force: bool = False) -> None:
        mtimes = (self._mtime(TOKENS_FILE), self._mtime(TENANTS_FILE))
        if mtimes == self._mtimes and not force:
            return
        self._mtimes = mtimes
        tokens = self._read(TOKENS_FILE, {"tokens": []})["tokens"]
        self._tokens = {t["id"]: TokenRecord(**t) for t in tokens}
        tenants = self._read(TENANTS_FILE, {"tenants": {}})["tenants"]
        self._tenants = {name: TenantPolicy(**p) for name, p in tenants.items()}

    def _read(self, name: str, empty: dict) -> dict:
        try:
            return json.loads((self.directory / name).read_text())
        except FileNotFoundError:
            return empty

    def tokens(self) -> list[TokenRecord]:
        self.refresh()
        return sorted(self._tokens.values(), key=lambda t: (t.created_at_s, t.id))

    def tenant(self, name: str) -> TenantPolicy:
        self.refresh()
        return self._tenants.get(name, TenantPolicy())

    def tenants(self) -> dict[str, TenantPolicy]:
        self.refresh()
        return dict(self._tenants)

    # ----- checking ------------------------------------------------------------------------
    def authenticate(self, token: str) -> Identity | None:
        """The identity behind an api token, or None (unknown, revoked, malformed)."""
        token_id, secret = split_token(token)
        self.refresh()
        rec = self._tokens.get(token_id)
        if rec is None or rec.kind != "api":
            _sha256(secret)  # same work either way: the timing says nothing about the id
            return None
        if not hmac.compare_digest(rec.secret_sha256, _sha256(secret)):
            return None
        return Identity(rec.tenant, rec.role, rec.id)

    def secrets_of(self, kind: str) -> dict[str, bytes]:
        """Key id -> secret for pipeline or join tokens."""
        self.refresh()
        return {t.id: t.secret.encode() for t in self._tokens.values() if t.kind == kind}

    def tenant_of_key(self, key_id: str) -> str:
        self.refresh()
        rec = self._tokens.get(key_id)
        return rec.tenant if rec is not None else ""

    # ----- writing -------------------------------------------------------------------------
    def create(self, kind: str, tenant: str = DEFAULT_TENANT, role: str = "user",
               description: str = "") -> tuple[TokenRecord, str]:
        """A new token; returns its record and the token text, shown once."""
        if kind not in KINDS:
            raise ValueError(f"kind: one of {', '.join(KINDS)}")
        if role not in ROLES:
            raise ValueError(f"role: one of {', '.join(ROLES)}")
        self.refresh(force=True)
        token_id, secret = secrets.token_hex(4), secrets.token_urlsafe(24)
        rec = TokenRecord(token_id, kind, tenant, role if kind == "api" else "",
                          secret_sha256=_sha256(secret) if kind == "api" else "",
                          secret=secret if kind != "api" else "", created_at_s=time.time(),
                          description=description)
        self._tokens[token_id] = rec
        self._save_tokens()
        return rec, f"{token_id}.{secret}"

    def revoke(self, token_id: str) -> bool:
        self.refresh(force=True)
        if self._tokens.pop(token_id, None) is None:
            return False
        self._save_tokens()
        return True

    def set_tenant(self, name: str, policy: TenantPolicy) -> None:
        self.refresh(force=True)
        self._tenants[name] = policy
        data = {"tenants": {n: asdict(p) for n, p in sorted(self._tenants.items())}}
        write_private(self.directory / TENANTS_FILE, json.dumps(data, indent=2).encode())
        self.refresh(force=True)

    def _save_tokens(self) -> None:
        data = {"tokens": [asdict(t) for t in sorted(self._tokens.values(), key=lambda t: t.id)]}
        write_private(self.directory / TOKENS_FILE, json.dumps(data, indent=2).encode())
        self.refresh(force=True)
