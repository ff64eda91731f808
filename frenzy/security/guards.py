"""What the orchestrator and the node agents check on the records they consume.

Each guard is a `verify(record, env, topic) -> reason` function for `Bus.run_consumer`: a
non-empty reason dead-letters the record. Guards hold the keys and replay caches; they do no
I/O except the orchestrator's small agent-key file.

The orchestrator accepts
  job_submitted       signed by itself (gRPC submissions, re-plans) or by a tenant's pipeline
                      key (HMAC); the verified tenant is written into the payload;
  job_status_changed  from an agent only when signed by the agent that owns status.node_id;
  node_heartbeat      only when signed by the agent that owns heartbeat.node_id;
  checkpoints_deleted only when signed by the agent that owns its node_id (a forged ack would
                      leave a job's checkpoints behind);
  agent_join          checked in its handler (`join`): the proof of a join token.
An agent accepts its commands (launch_job, stop_job, delete_checkpoints) only when signed by
the orchestrator, meant for itself, not expired and not seen before.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from frenzy import topics
from frenzy.logs import get_logger
from frenzy.security import signing
from frenzy.security.limits import job_id_problem
from frenzy.security.store import SecurityStore, write_private
from frenzy.security.tenancy import entrypoint_problem
from frenzy.v1 import events_pb2

AGENTS_FILE = "agents.json"
ORCHESTRATOR_KEY_FILE = "orchestrator.key"
JOIN_MAX_AGE_S = 600.0  # a join record older than this is refused (replays of retired keys)
log = get_logger("security")


def load_or_create_orchestrator_key(directory: Path) -> Ed25519PrivateKey:
    path = directory / ORCHESTRATOR_KEY_FILE
    if not path.exists():
        write_private(path, signing.private_key_pem(signing.new_private_key()))
    return signing.load_private_key(path.read_bytes())


def orchestrator_public_key_b64(directory: Path) -> str:
    import base64

    return base64.b64encode(signing.public_key_raw(load_or_create_orchestrator_key(directory))).decode()


def _record_key(record) -> bytes:
    return record.key or b""


class OrchestratorGuard:
    def __init__(self, store: SecurityStore, key: Ed25519PrivateKey, command_ttl_s: float,
                 record_ttl_s: float, pipeline_max_ttl_s: float) -> None:
        self.store = store
        self.record_ttl_s = record_ttl_s
        self.pipeline_max_ttl_s = pipeline_max_ttl_s
        self.signer = signing.Ed25519Signer(key, signing.ORCHESTRATOR_SIGNER, {
            topics.AGENT_COMMANDS.name: command_ttl_s, topics.JOBS_SUBMITTED.name: record_ttl_s,
            topics.JOBS_STATUS.name: record_ttl_s, topics.CLUSTER_EVENTS.name: record_ttl_s})
        self.own_key = key.public_key()
        self.agent_keys: dict[str, Ed25519PublicKey] = {}
        self.replays = signing.ReplayCache()
        self.last_heartbeat_ns: dict[str, int] = {}  # node -> produced_at of its latest heartbeat
        # Event ids of pipeline records accepted since; the orchestrator re-publishes each one,
        # signed, for the predictor (which plans only what the orchestrator signed).
        self.accepted_pipeline_events: set[str] = set()
        self._load_agents()

    # ----- agent keys ------------------------------------------------------------------------
    def _agents_path(self) -> Path:
        return self.store.directory / AGENTS_FILE

    def _load_agents(self) -> None:
        try:
            saved = json.loads(self._agents_path().read_text())
        except (OSError, ValueError):
            return
        for node_id, key_b64 in saved.items():
            self.agent_keys[signing.node_signer(node_id)] = signing.load_public_key(key_b64)

    def join(self, join: events_pb2.AgentJoin, now_s: float | None = None) -> str:
        """Register an agent's key if its join proof holds; returns why not, or ""."""
        import base64
        import hmac as hmac_lib

        now_s = now_s if now_s is not None else time.time()
        secret = self.store.secrets_of("join").get(join.join_token_id)
        if secret is None:
            return f"agent join: unknown join token {join.join_token_id[:40]!r}"
        issued_s = join.issued_at.seconds
        if abs(now_s - issued_s) > JOIN_MAX_AGE_S:
            return "agent join: issued_at is too old or in the future"
        want = signing.join_proof(secret, join.node_id, join.public_key, issued_s)
        if not hmac_lib.compare_digest(want, join.proof):
            return "agent join: forged proof"
        if job_id_problem(join.node_id):
            return "agent join: bad node id"
        try:
            public = signing.load_public_key(bytes(join.public_key))
        except ValueError:
            return "agent join: not an Ed25519 public key"
        signer = signing.node_signer(join.node_id)
        known = self.agent_keys.get(signer)
        if known is None or signing.public_key_raw(known) != bytes(join.public_key):
            self.agent_keys[signer] = public
            saved = {s.removeprefix("node/"): base64.b64encode(signing.public_key_raw(k)).decode()
                     for s, k in self.agent_keys.items()}
            write_private(self._agents_path(), json.dumps(saved, indent=2).encode())
            log.info("agent joined", node_id=join.node_id, join_token_id=join.join_token_id)
        return ""

    # ----- records ---------------------------------------------------------------------------
    def verify(self, record, env: events_pb2.Envelope, topic: str) -> str:
        now_s = time.time()
        kind = env.type
        try:
            if kind == "job_submitted" and topic == topics.JOBS_SUBMITTED.name:
                return self._submitted(record, env, topic, now_s)
            if kind == "job_status_changed" and env.job_status_changed.source == events_pb2.AGENT:
                expires_s = self._from_node(record, topic, env.job_status_changed.node_id, now_s)
                if not self.replays.first_time(env.event_id, expires_s, now_s):
                    return f"{kind}: replayed status {env.event_id[:40]!r}"
            elif kind == "checkpoints_deleted":
                expires_s = self._from_node(record, topic, env.checkpoints_deleted.node_id, now_s)
                if not self.replays.first_time(env.event_id, expires_s, now_s):
                    return f"{kind}: replayed acknowledgement {env.event_id[:40]!r}"
            elif kind == "node_heartbeat":
                node_id = env.node_heartbeat.node_id
                self._from_node(record, topic, node_id, now_s)
                # One node's heartbeats share a partition, so they arrive in the order sent.
                produced_ns = env.produced_at.ToNanoseconds()
                if produced_ns <= self.last_heartbeat_ns.get(node_id, 0):
                    return f"{kind}: replayed or out-of-order heartbeat from {node_id!r}"
                self.last_heartbeat_ns[node_id] = produced_ns
        except signing.VerifyError as err:
            return f"{kind}: {err}"
        return ""

    def _from_node(self, record, topic: str, node_id: str, now_s: float) -> int:
        signer, expires_s = signing.verify_ed25519(self.agent_keys, topic, _record_key(record),
                                                   record.value, record.headers, now_s,
                                                   self.record_ttl_s)
        if signer != signing.node_signer(node_id):
            raise signing.VerifyError(f"signed by {signer!r}, not by node {node_id!r}'s agent")
        return expires_s

    def _submitted(self, record, env: events_pb2.Envelope, topic: str, now_s: float) -> str:
        submitted = env.job_submitted
        if signing.header(record.headers, signing.SIGNER) == signing.ORCHESTRATOR_SIGNER:
            signing.verify_ed25519({signing.ORCHESTRATOR_SIGNER: self.own_key}, topic,
                                   _record_key(record), record.value, record.headers, now_s,
                                   self.record_ttl_s)
            return ""  # its own submissions and re-plans carry the tenant it set
        if submitted.attempt != 0:
            return "job_submitted: a re-plan request must come from the orchestrator"
        key_id, expires_s, mac = signing.verify_hmac(
            self.store.secrets_of("pipeline"), topic, _record_key(record), record.value,
            record.headers, now_s, self.pipeline_max_ttl_s)
        if not self.replays.first_time(mac, expires_s, now_s):
            return "job_submitted: replayed (this signature was already used)"
        tenant = self.store.tenant_of_key(key_id)
        submitted.tenant = tenant  # the verified owner, whatever the payload claimed
        problem = job_id_problem(submitted.job_id) if submitted.job_id else ""
        if problem:
            return f"job_submitted: job_id {problem}"
        problem = entrypoint_problem(list(submitted.spec.entrypoint), self.store.tenant(tenant))
        if problem:
            return f"job_submitted: entrypoint {problem}"
        self.accepted_pipeline_events.add(env.event_id)
        return ""


def _orchestrator_signed(keys: list[Ed25519PublicKey], record, topic: str, max_ttl_s: float) -> str:
    """Why the record is not the orchestrator's, or "" (tries each key while one rotates)."""
    why = "no orchestrator key"
    for public in keys:
        try:
            signing.verify_ed25519({signing.ORCHESTRATOR_SIGNER: public}, topic, _record_key(record),
                                   record.value, record.headers, time.time(), max_ttl_s)
            return ""
        except signing.VerifyError as err:
            why = str(err)
    return why


def orchestrator_signed_only(orchestrator_keys: list[Ed25519PublicKey], max_ttl_s: float):
    """A verifier for the predictor: plan only JobSubmitted records the orchestrator signed.

    A pipeline's record is judged by the orchestrator (which holds the tenants' keys); once it
    accepts one it publishes it again, signed. Everything else is skipped here, not
    dead-lettered: the orchestrator dead-letters it once, with the reason.
    """
    from frenzy.bus import SKIP

    def verify(record, env: events_pb2.Envelope, topic: str) -> str:
        if env.type != "job_submitted":
            return ""
        return SKIP if _orchestrator_signed(orchestrator_keys, record, topic, max_ttl_s) else ""

    return verify


def orchestrator_state_only(orchestrator_keys: list[Ed25519PublicKey], max_ttl_s: float):
    """A verifier for the scheduler: GPU availability and authoritative job states count only
    when the orchestrator signed them; a forged one (a node that does not exist, a version from
    the future that would hide every real update) is dead-lettered. Agents' own status records
    are not the scheduler's concern and are skipped."""
    from frenzy.bus import SKIP

    def verify(record, env: events_pb2.Envelope, topic: str) -> str:
        if env.type == "job_status_changed" and env.job_status_changed.source != events_pb2.ORCHESTRATOR:
            return SKIP
        if env.type not in ("job_status_changed", "gpu_availability_changed"):
            return ""
        why = _orchestrator_signed(orchestrator_keys, record, topic, max_ttl_s)
        return f"{env.type}: {why}" if why else ""

    return verify


# Every command an agent acts on; each must be signed by the orchestrator and name this node.
AGENT_COMMAND_TYPES = ("launch_job", "stop_job", "delete_checkpoints")


class AgentGuard:
    """The commands one agent accepts."""

    def __init__(self, node_id: str, orchestrator_keys: list[Ed25519PublicKey],
                 command_ttl_s: float) -> None:
        self.node_id = node_id
        # Several keys while the orchestrator's key rotates (docs/security.md).
        self.keys = orchestrator_keys
        self.command_ttl_s = command_ttl_s
        self.replays = signing.ReplayCache()

    def verify(self, record, env: events_pb2.Envelope, topic: str) -> str:
        if env.type not in AGENT_COMMAND_TYPES:
            return ""
        now_s = time.time()
        key = _record_key(record).decode(errors="replace")
        command = getattr(env, env.type)
        if key != self.node_id and command.node_id != self.node_id:
            return ""  # another node's command on a shared partition: not ours to judge
        last_error: signing.VerifyError | None = None
        expires_s = 0
        for public in self.keys:
            try:
                _, expires_s = signing.verify_ed25519({signing.ORCHESTRATOR_SIGNER: public}, topic,
                                                      _record_key(record), record.value,
                                                      record.headers, now_s, self.command_ttl_s)
                last_error = None
                break
            except signing.VerifyError as err:
                last_error = err
        if last_error is not None:
            return f"{env.type}: {last_error}"
        if command.node_id != self.node_id or key != self.node_id:
            return f"{env.type}: not for this node (for {command.node_id[:80]!r}, key {key[:80]!r})"
        if not self.replays.first_time(env.event_id, expires_s, now_s):
            return f"{env.type}: replayed command {env.event_id[:40]!r}"
        return ""
