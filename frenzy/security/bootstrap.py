"""First start of a local cluster: keys, certificates, the admin token and the client config.

Like k3s on its first start: make a CA and server certificate, an admin credential, and a
join token for nodes, then write a client config (address, token, CA) with mode 0600. A second
start with the same workdir reuses all of it, including the admin token in client.json.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from frenzy.security.clientconfig import (CLIENT_CONFIG_FILE, ClientConfig, read_client_config,
                                          registry_path, write_client_config)
from frenzy.security.guards import orchestrator_public_key_b64
from frenzy.security.store import (DEFAULT_TENANT, TENANTS_FILE, SecurityStore, TenantPolicy,
                                   write_private)
from frenzy.security.tls import ensure_server_tls

SECURITY_DIR = "security"
JOIN_TOKEN_FILE, ORCHESTRATOR_PUBLIC_KEY_FILE = "join-token", "orchestrator.pub"


@dataclass(frozen=True)
class LocalSecurity:
    directory: Path
    admin_token: str
    join_token: str
    orchestrator_key_b64: str
    ca_pem: str
    client_config_path: Path

    def client_config(self, address: str) -> ClientConfig:
        return ClientConfig(address, self.admin_token, self.ca_pem)

    def orchestrator_env(self) -> dict[str, str]:
        return {"FRENZY_SECURITY_DIR": str(self.directory)}

    def verifier_env(self) -> dict[str, str]:
        """The orchestrator's public key: for services that check what it signed (predictor,
        scheduler), and the tenants' weights and quotas (no secrets) for the scheduler."""
        return {"FRENZY_ORCHESTRATOR_KEY": self.orchestrator_key_b64,
                "FRENZY_TENANTS_FILE": str(self.directory / TENANTS_FILE)}

    def agent_env(self) -> dict[str, str]:
        """Agents get their join token and the orchestrator's public key, not the directory."""
        return {"FRENZY_JOIN_TOKEN": self.join_token, "FRENZY_ORCHESTRATOR_KEY": self.orchestrator_key_b64}

    def create_pipeline_key(self, tenant: str = DEFAULT_TENANT) -> tuple[str, bytes]:
        rec, token = SecurityStore(self.directory).create("pipeline", tenant, description="local")
        return rec.id, token.split(".", 1)[1].encode()


def prepare_local_security(workdir: Path, address: str) -> LocalSecurity:
    """`frenzy up`: the security directory under the workdir, client.json beside it."""
    security = init_security(workdir / SECURITY_DIR, address, workdir / CLIENT_CONFIG_FILE)
    write_client_config(registry_path(address), security.client_config(address))
    return security


def init_security(directory: Path, address: str, config_path: Path,
                  tls_names: list[str] | None = None, bootstrap_dir: Path | None = None) -> LocalSecurity:
    """Make (or reuse) keys, certificates and tokens; write the client config.

    bootstrap_dir, when given, receives what agents and the predictor need and nothing else:
    the join token and the orchestrator's public key (compose mounts it read-only).
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    tls = ensure_server_tls(directory, tls_names)
    key_b64 = orchestrator_public_key_b64(directory)
    store = SecurityStore(directory)
    saved = read_client_config(config_path)
    admin_token = saved.token if saved and store.authenticate(saved.token) else ""
    if not admin_token:
        _, admin_token = store.create("api", DEFAULT_TENANT, "admin", "frenzy up: first admin")
    joins = store.secrets_of("join")
    if joins:
        token_id, secret = next(iter(sorted(joins.items())))
        join_token = f"{token_id}.{secret.decode()}"
    else:
        _, join_token = store.create("join", DEFAULT_TENANT, description="frenzy up: local agents")
    if DEFAULT_TENANT not in store.tenants():
        # The local cluster's owner runs what they like on their own machine ("*"); tenants
        # an admin adds later start with the reference trainer only and a rate limit.
        store.set_tenant(DEFAULT_TENANT, TenantPolicy(entrypoints=["*"], requests_per_s=0))
    security = LocalSecurity(directory, admin_token, join_token, key_b64, tls.ca_pem.decode(),
                             config_path)
    write_client_config(config_path, security.client_config(address))
    if bootstrap_dir is not None:
        write_private(bootstrap_dir / JOIN_TOKEN_FILE, join_token.encode())
        write_private(bootstrap_dir / ORCHESTRATOR_PUBLIC_KEY_FILE, key_b64.encode())
    return security
