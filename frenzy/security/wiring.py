"""Build each service's security pieces from its settings (the services' only entry here)."""
from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path

from frenzy import topics
from frenzy.config import ServiceSettings
from frenzy.logs import get_logger
from frenzy.security import signing
from frenzy.security.grpc_auth import Authenticator
from frenzy.security.guards import (AgentGuard, OrchestratorGuard, load_or_create_orchestrator_key,
                                    orchestrator_signed_only, orchestrator_state_only)
from frenzy.security.store import SecurityStore, split_token, write_private
from frenzy.security.tls import ServerTls, load_server_tls
from frenzy.v1 import events_pb2

log = get_logger("security")
AGENT_KEY_FILE = "agent.key"


@dataclass
class OrchestratorSecurity:
    auth: Authenticator
    guard: OrchestratorGuard | None
    tls: ServerTls | None


def orchestrator_security(settings: ServiceSettings) -> OrchestratorSecurity:
    if not settings.security_dir:
        log.warning("no FRENZY_SECURITY_DIR: gRPC without authentication, records unsigned "
                    "(development only; `frenzy up` always sets it)")
        return OrchestratorSecurity(Authenticator(None), None, None)
    directory = Path(settings.security_dir)
    store = SecurityStore(directory)
    key = load_or_create_orchestrator_key(directory)
    guard = OrchestratorGuard(store, key, settings.command_ttl_s, settings.record_ttl_s,
                              settings.pipeline_max_ttl_s)
    tls = load_server_tls(directory) if settings.grpc_tls else None
    return OrchestratorSecurity(Authenticator(store), guard, tls)


@dataclass
class AgentSecurity:
    signer: signing.Ed25519Signer
    guard: AgentGuard
    join_token: str

    def join_record(self, node_id: str, now_s: float | None = None) -> events_pb2.AgentJoin:
        token_id, secret = split_token(self.join_token)
        issued_s = int(now_s if now_s is not None else time.time())
        public = signing.public_key_raw(self.signer.key)
        join = events_pb2.AgentJoin(node_id=node_id, public_key=public, join_token_id=token_id,
                                    proof=signing.join_proof(secret.encode(), node_id, public, issued_s))
        join.issued_at.FromSeconds(issued_s)
        return join


def with_files(settings: ServiceSettings) -> ServiceSettings:
    """Settings with join_token / orchestrator_key read from their *_file, where given."""
    updates = {}
    if settings.join_token_file and not settings.join_token:
        updates["join_token"] = Path(settings.join_token_file).read_text().strip()
    if settings.orchestrator_key_file and not settings.orchestrator_key:
        updates["orchestrator_key"] = Path(settings.orchestrator_key_file).read_text().strip()
    return settings.model_copy(update=updates) if updates else settings


def orchestrator_keys(settings: ServiceSettings) -> list:
    """The orchestrator's public keys (several while one rotates), from FRENZY_ORCHESTRATOR_KEY."""
    return [signing.load_public_key(base64.b64decode(k)) for k in settings.orchestrator_key.split(",") if k]


def predictor_verifier(settings: ServiceSettings):
    """The predictor plans only what the orchestrator signed; None without a key (development)."""
    settings = with_files(settings)
    if not settings.orchestrator_key:
        return None
    return orchestrator_signed_only(orchestrator_keys(settings), settings.record_ttl_s)


def scheduler_verifier(settings: ServiceSettings):
    """The scheduler trusts availability and job states only from the orchestrator."""
    settings = with_files(settings)
    if not settings.orchestrator_key:
        return None
    return orchestrator_state_only(orchestrator_keys(settings), settings.record_ttl_s)


def tenant_policies(settings: ServiceSettings):
    """Tenants' weights and quotas (no secrets), re-read when tenants.json changes; without
    FRENZY_TENANTS_FILE, none (every tenant weighs 1 and has no quota)."""
    if not settings.tenants_file:
        return dict
    return SecurityStore(Path(settings.tenants_file).parent).tenants


def agent_security(settings: ServiceSettings, node_id: str, key_dir: Path) -> AgentSecurity | None:
    """None without an orchestrator key: commands are then accepted unsigned (development)."""
    settings = with_files(settings)
    if not settings.orchestrator_key:
        log.warning("no FRENZY_ORCHESTRATOR_KEY: commands accepted unsigned (development only)",
                    node_id=node_id)
        return None
    if not split_token(settings.join_token)[0]:
        raise SystemExit("FRENZY_JOIN_TOKEN is missing or malformed (want <id>.<secret>)")
    path = key_dir / AGENT_KEY_FILE  # kept across restarts: the orchestrator knows this key
    if not path.exists():
        write_private(path, signing.private_key_pem(signing.new_private_key()))
    key = signing.load_private_key(path.read_bytes())
    signer = signing.Ed25519Signer(key, signing.node_signer(node_id), {
        topics.JOBS_STATUS.name: settings.record_ttl_s, topics.NODES_HEARTBEATS.name: settings.record_ttl_s})
    return AgentSecurity(signer, AgentGuard(node_id, orchestrator_keys(settings), settings.command_ttl_s),
                         settings.join_token)
