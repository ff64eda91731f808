"""Who may look: login tickets, API tokens and browser sessions (pure; no I/O but the clock).

The login works as Jupyter's does: `frenzy up` prints a link carrying a token, the browser opens
it once, and the dashboard swaps the token for an HttpOnly session cookie and redirects to a URL
without it, so the token does not linger in the address bar or the history.

Two kinds of token open a session:
- a one-time login ticket (the link `frenzy up` prints), good for one use;
- an API token that an `Authenticator` resolves to a principal: any object with
  `authenticate(token) -> Principal | None`. Three are built in, tried in this order:
  `FRENZY_DASHBOARD_AUTHENTICATOR=module:factory` (a plug of your own), a JSON file of tokens
  (`FRENZY_DASHBOARD_TOKENS_FILE`, e.g. a mounted Kubernetes Secret), and the security store
  of the gRPC API (`FRENZY_SECURITY_DIR`, frenzy/security/store.py): the same `<id>.<secret>`
  tokens that `frenzy token create` makes, with the same tenant and role.

A session opened with an API token asks the authenticator again on every request, so a token
revoked with `frenzy token revoke` closes its sessions at their next request (the store rereads
its file when it changes), as it stops the token's gRPC calls.

Tokens are kept only as SHA-256 digests, and looked up by digest, so a lookup's timing says
nothing about a token's prefix.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from frenzy.security.store import SecurityStore
from frenzy_dashboard.view import Principal

SESSION_COOKIE = "frenzy_session"
ROLES = ("admin", "user")


class Authenticator(Protocol):
    def authenticate(self, token: str) -> Principal | None: ...


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(24)


def principal_from(data: dict, where: str) -> Principal:
    """A principal from {"tenant": ..., "role": ...}; a ValueError names the bad field."""
    tenant, role = data.get("tenant"), data.get("role", "user")
    if not isinstance(tenant, str) or not tenant:
        raise ValueError(f"{where}.tenant: must be a non-empty string")
    if role not in ROLES:
        raise ValueError(f"{where}.role: must be one of {', '.join(ROLES)}, got {role!r}")
    return Principal(tenant, role)


class StaticTokens:
    """Tokens from a JSON file: {"<token>": {"tenant": "team-a", "role": "user"}, ...}."""

    def __init__(self, tokens: dict[str, Principal]) -> None:
        self._by_digest = {digest(t): p for t, p in tokens.items()}

    @classmethod
    def from_file(cls, path: Path) -> "StaticTokens":
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: must be a JSON object of token -> principal")
        return cls({token: principal_from(p, f"{path}[{token[:4]}…]") for token, p in data.items()})

    def authenticate(self, token: str) -> Principal | None:
        return self._by_digest.get(digest(token))


class NoTokens:
    def authenticate(self, token: str) -> Principal | None:
        return None


class SecurityTokens:
    """The gRPC API's api tokens (frenzy/security/store.py): one login for both."""

    def __init__(self, store: SecurityStore) -> None:
        self._store = store

    def authenticate(self, token: str) -> Principal | None:
        identity = self._store.authenticate(token)
        return None if identity is None else Principal(identity.tenant, identity.role)


@dataclass
class FirstOf:
    """The first authenticator that knows the token decides."""

    authenticators: list[Authenticator]

    def authenticate(self, token: str) -> Principal | None:
        for authenticator in self.authenticators:
            principal = authenticator.authenticate(token)
            if principal is not None:
                return principal
        return None


def load_authenticator(spec: str, tokens_file: str, security_dir: str = "") -> Authenticator:
    """Every configured source, in order: `module:factory` (called with no arguments), the
    tokens file, the security store; none configured: no API token logs in (tickets still do)."""
    found: list[Authenticator] = []
    if spec:
        module_name, _, attribute = spec.partition(":")
        factory: Callable[[], Authenticator] = getattr(importlib.import_module(module_name), attribute)
        found.append(factory())
    if tokens_file:
        found.append(StaticTokens.from_file(Path(tokens_file)))
    if security_dir:
        found.append(SecurityTokens(SecurityStore(security_dir)))
    if not found:
        return NoTokens()
    return found[0] if len(found) == 1 else FirstOf(found)


@dataclass
class Gate:
    """Login tickets and sessions of one dashboard process."""

    authenticator: Authenticator
    session_ttl_s: float = 12 * 3600
    clock: Callable[[], float] = time.monotonic
    _tickets: dict[str, Principal] = field(default_factory=dict)
    # digest(session id) -> (principal, expiry, the API token to recheck; "" for a ticket's)
    _sessions: dict[str, tuple[Principal, float, str]] = field(default_factory=dict)

    def add_ticket(self, ticket: str, principal: Principal) -> None:
        self._tickets[digest(ticket)] = principal

    def login(self, token: str) -> str | None:
        """A new session id for a valid ticket (used up) or API token; None if neither."""
        recheck = ""
        principal = self._tickets.pop(digest(token), None)
        if principal is None:
            principal, recheck = self.authenticator.authenticate(token), token
        if principal is None:
            return None
        session_id = new_token()
        self._sessions[digest(session_id)] = (principal, self.clock() + self.session_ttl_s, recheck)
        return session_id

    def principal(self, session_id: str) -> Principal | None:
        entry = self._sessions.get(digest(session_id)) if session_id else None
        if entry is None:
            return None
        principal, expires_s, recheck = entry
        # A revoked token (or one whose tenant or role changed) ends the session.
        if self.clock() > expires_s or (recheck and self.authenticator.authenticate(recheck) != principal):
            del self._sessions[digest(session_id)]
            return None
        return principal

    def logout(self, session_id: str) -> None:
        self._sessions.pop(digest(session_id), None)
