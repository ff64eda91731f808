"""What the orchestrator and the agents accept, on records built here (no broker)."""
from __future__ import annotations

import base64
import time
from dataclasses import dataclass

from frenzy import events, topics
from frenzy.config import ServiceSettings
from frenzy.security import signing
from frenzy.security.guards import AgentGuard, OrchestratorGuard
from frenzy.security.store import SecurityStore
from frenzy.security.wiring import agent_security
from frenzy.v1 import events_pb2, types_pb2


@dataclass
class Record:
    key: bytes
    value: bytes
    headers: list


def record(topic: str, key: str, payload, signer=None, extra_headers=()) -> tuple[Record, events_pb2.Envelope]:
    env = events.envelope(payload)
    value, headers = events.encode(env)
    if signer is not None:
        headers += signer.headers(topic, key.encode(), value)
    headers += list(extra_headers)
    return Record(key.encode(), value, headers), events.decode(value, headers)


def orchestrator(tmp_path):
    key = signing.new_private_key()
    store = SecurityStore(tmp_path)
    return OrchestratorGuard(store, key, 60.0, 86400.0, 600.0), key, store


def test_agent_runs_only_fresh_signed_commands_meant_for_it(tmp_path):
    guard, key, _ = orchestrator(tmp_path)
    agent = AgentGuard("n1", [key.public_key()], 60.0)
    launch = events_pb2.LaunchJob(job_id="j", node_id="n1", attempt=0)
    good, env = record(topics.AGENT_COMMANDS.name, "n1", launch, guard.signer)
    assert agent.verify(good, env, topics.AGENT_COMMANDS.name) == ""
    assert "replayed" in agent.verify(good, env, topics.AGENT_COMMANDS.name)
    unsigned, env = record(topics.AGENT_COMMANDS.name, "n1", launch)
    assert "unsigned" in agent.verify(unsigned, env, topics.AGENT_COMMANDS.name)
    rogue = signing.Ed25519Signer(signing.new_private_key(), "orchestrator", dict.fromkeys(guard.signer.topics, 60))
    forged, env = record(topics.AGENT_COMMANDS.name, "n1", launch, rogue)
    assert "forged" in agent.verify(forged, env, topics.AGENT_COMMANDS.name)
    expired_signer = signing.Ed25519Signer(key, "orchestrator", dict.fromkeys(guard.signer.topics, -5))
    expired, env = record(topics.AGENT_COMMANDS.name, "n1", launch, expired_signer)
    assert "expired" in agent.verify(expired, env, topics.AGENT_COMMANDS.name)
    elsewhere = events_pb2.LaunchJob(job_id="j", node_id="n2", attempt=0)
    misrouted, env = record(topics.AGENT_COMMANDS.name, "n1", elsewhere, guard.signer)
    assert "not for this node" in agent.verify(misrouted, env, topics.AGENT_COMMANDS.name)
    others, env = record(topics.AGENT_COMMANDS.name, "n2", elsewhere, guard.signer)
    assert agent.verify(others, env, topics.AGENT_COMMANDS.name) == ""  # n2's, on a shared partition


def orchestrator_with_two_agents(tmp_path):
    """An orchestrator's guard that nodes n1 and n2 have joined with their own keys."""
    guard, _, store = orchestrator(tmp_path)
    _, join_token = store.create("join")
    public_b64 = base64.b64encode(signing.public_key_raw(guard.signer.key)).decode()
    settings = ServiceSettings(join_token=join_token, orchestrator_key=public_b64)
    n1 = agent_security(settings, "n1", tmp_path / "n1")
    n2 = agent_security(settings, "n2", tmp_path / "n2")
    assert guard.join(n1.join_record("n1")) == "" and guard.join(n2.join_record("n2")) == ""
    return guard, n1, n2


def test_orchestrator_takes_status_and_heartbeats_only_from_the_nodes_own_agent(tmp_path):
    guard, n1, n2 = orchestrator_with_two_agents(tmp_path)
    status = events_pb2.JobStatusChanged(job_id="j", node_id="n1", state=types_pb2.SUCCEEDED,
                                         source=events_pb2.AGENT)
    topic = topics.JOBS_STATUS.name
    ok, env = record(topic, "j", status, n1.signer)
    assert guard.verify(ok, env, topic) == ""
    impostor, env = record(topic, "j", status, n2.signer)  # n2's agent speaking for n1
    assert "not by node 'n1'" in guard.verify(impostor, env, topic)
    unsigned, env = record(topic, "j", status)
    assert "unsigned" in guard.verify(unsigned, env, topic)
    ghost = events_pb2.NodeHeartbeat(node_id="ghost", gpus=[types_pb2.GpuStatus(index=0)])
    hb, env = record(topics.NODES_HEARTBEATS.name, "ghost", ghost)
    assert "unsigned" in guard.verify(hb, env, topics.NODES_HEARTBEATS.name)


def test_a_join_needs_a_real_join_token(tmp_path):
    guard, _, store = orchestrator(tmp_path)
    _, join_token = store.create("join")
    join = events_pb2.AgentJoin(node_id="n1", public_key=signing.public_key_raw(signing.new_private_key()),
                                join_token_id=join_token.split(".")[0], proof=b"x" * 32)
    join.issued_at.FromSeconds(int(time.time()))
    assert "forged proof" in guard.join(join)
    join.join_token_id = "nope"
    assert "unknown join token" in guard.join(join)


def test_pipeline_records_need_a_tenant_signature_once(tmp_path):
    guard, _, store = orchestrator(tmp_path)
    rec, token = store.create("pipeline", "team-a")
    key_id, secret = token.split(".")
    topic = topics.JOBS_SUBMITTED.name
    submitted = events_pb2.JobSubmitted(job_id="p1", tenant="admin-pretender",
                                        spec=types_pb2.JobSpec(name="p", model="gpt2"))
    env = events.envelope(submitted)
    value, headers = events.encode(env)
    signed = Record(b"p1", value, headers + signing.pipeline_headers(key_id, secret.encode(), topic, b"p1", value))
    decoded = events.decode(signed.value, signed.headers)
    assert guard.verify(signed, decoded, topic) == ""
    assert decoded.job_submitted.tenant == "team-a"  # the key's tenant, not the payload's claim
    assert "replayed" in guard.verify(signed, events.decode(value, headers), topic)
    unsigned = Record(b"p1", value, headers)
    assert "unsigned" in guard.verify(unsigned, events.decode(value, headers), topic)
    forged = Record(b"p1", value, headers + signing.pipeline_headers(key_id, b"guess", topic, b"p1", value))
    assert "forged" in guard.verify(forged, events.decode(value, headers), topic)
    own, env = record(topic, "p2", events_pb2.JobSubmitted(job_id="p2", tenant="t"), guard.signer)
    assert guard.verify(own, env, topic) == ""  # the orchestrator's own submissions and re-plans


def test_the_predictor_plans_only_what_the_orchestrator_signed(tmp_path):
    from frenzy.bus import SKIP
    from frenzy.security.guards import orchestrator_signed_only

    guard, key, _ = orchestrator(tmp_path)
    verify = orchestrator_signed_only([key.public_key()], 86400.0)
    topic = topics.JOBS_SUBMITTED.name
    signed, env = record(topic, "j", events_pb2.JobSubmitted(job_id="j"), guard.signer)
    assert verify(signed, env, topic) == ""
    raw, env = record(topic, "j", events_pb2.JobSubmitted(job_id="j"))
    assert verify(raw, env, topic) == SKIP  # the orchestrator judges it and dead-letters it once


def test_the_scheduler_takes_availability_and_job_states_only_from_the_orchestrator(tmp_path):
    from frenzy.bus import SKIP
    from frenzy.security.guards import orchestrator_state_only

    guard, key, _ = orchestrator(tmp_path)
    verify = orchestrator_state_only([key.public_key()], 86400.0)
    topic = topics.CLUSTER_EVENTS.name
    bogus = events_pb2.GpuAvailabilityChanged(node_id="ghost", gpu_type="H100-80GB", gpus_total=8,
                                              free_gpu_indices=range(8), version=2**62)
    forged, env = record(topic, "ghost", bogus)
    assert "unsigned" in verify(forged, env, topic)
    real, env = record(topic, "ghost", bogus, guard.signer)
    assert verify(real, env, topic) == ""
    agent_status = events_pb2.JobStatusChanged(job_id="j", source=events_pb2.AGENT)
    rec, env = record(topics.JOBS_STATUS.name, "j", agent_status)
    assert verify(rec, env, topics.JOBS_STATUS.name) == SKIP


def test_heartbeats_must_move_forward_in_time(tmp_path):
    guard, _, store = orchestrator(tmp_path)
    _, join_token = store.create("join")
    public_b64 = base64.b64encode(signing.public_key_raw(guard.signer.key)).decode()
    n1 = agent_security(ServiceSettings(join_token=join_token, orchestrator_key=public_b64), "n1", tmp_path)
    assert guard.join(n1.join_record("n1")) == ""
    topic = topics.NODES_HEARTBEATS.name
    first, env1 = record(topic, "n1", events_pb2.NodeHeartbeat(node_id="n1", sequence=1), n1.signer)
    second, env2 = record(topic, "n1", events_pb2.NodeHeartbeat(node_id="n1", sequence=2), n1.signer)
    assert guard.verify(first, env1, topic) == "" and guard.verify(second, env2, topic) == ""
    assert "replayed" in guard.verify(first, events.decode(first.value, first.headers), topic)


def test_agent_removes_checkpoints_only_on_a_signed_command_for_it(tmp_path):
    """A forged DeleteCheckpoints would wipe a job's checkpoints: it is checked like a launch."""
    guard, key, _ = orchestrator(tmp_path)
    agent = AgentGuard("n1", [key.public_key()], 60.0)
    delete = events_pb2.DeleteCheckpoints(job_id="j", node_id="n1", reason="cancelled")
    good, env = record(topics.AGENT_COMMANDS.name, "n1", delete, guard.signer)
    assert agent.verify(good, env, topics.AGENT_COMMANDS.name) == ""
    unsigned, env = record(topics.AGENT_COMMANDS.name, "n1", delete)
    assert "unsigned" in agent.verify(unsigned, env, topics.AGENT_COMMANDS.name)


def test_orchestrator_takes_a_checkpoint_delete_ack_only_from_the_nodes_own_agent(tmp_path):
    """A forged CheckpointsDeleted would end the re-sends and leave a job's checkpoints behind."""
    guard, n1, n2 = orchestrator_with_two_agents(tmp_path)
    topic = topics.NODES_HEARTBEATS.name
    ack = events_pb2.CheckpointsDeleted(job_id="j", node_id="n1")
    ok, env = record(topic, "n1", ack, n1.signer)
    assert guard.verify(ok, env, topic) == ""
    assert "replayed" in guard.verify(ok, env, topic)
    impostor, env = record(topic, "n1", ack, n2.signer)
    assert "not by node 'n1'" in guard.verify(impostor, env, topic)
    unsigned, env = record(topic, "n1", ack)
    assert "unsigned" in guard.verify(unsigned, env, topic)
