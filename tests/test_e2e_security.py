"""Security on a real local cluster (TLS, tokens, signed records) against the attacks that
used to work: other tenants' jobs, forged and replayed agent commands, forged status and
heartbeats, unsigned pipeline records, client-named paths, escaping job ids, huge requests."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid

import grpc
import pytest

from frenzy import events, topics
from frenzy.client import FrenzyClient
from frenzy.jobstates import HOLDING, TERMINAL
from frenzy.security import signing
from frenzy.security.guards import load_or_create_orchestrator_key
from frenzy.security.store import SecurityStore, TenantPolicy
from frenzy.v1 import events_pb2, services_pb2, types_pb2

pytestmark = pytest.mark.e2e


def spec(name: str = "sec", entrypoint: list[str] | None = None, **kw) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name=name, model="gpt2", entrypoint=entrypoint or [],
                             training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8,
                                                               tokens=5_000_000), **kw)


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster("security")


@pytest.fixture(scope="module")
def store(cluster) -> SecurityStore:
    return SecurityStore(cluster.security.directory)


def tenant_client(cluster, store: SecurityStore, tenant: str, policy: TenantPolicy | None = None) -> FrenzyClient:
    if policy is not None:
        store.set_tenant(tenant, policy)
    _, token = store.create("api", tenant, "user")
    return FrenzyClient(cluster.grpc_address, token=token, ca_pem=cluster.security.ca_pem)


def wait_state(client: FrenzyClient, job_id: str, states: set[int], timeout_s: float = 60) -> types_pb2.Job:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(job_id)
        if job.state in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"{job_id} never reached {states}: {client.get(job_id)}")


def produce(cluster, topic: topics.Topic, key: bytes, value: bytes, headers: list) -> None:
    from aiokafka import AIOKafkaProducer

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(cluster.topic_name(topic), value, key=key, headers=headers)
        finally:
            await producer.stop()

    asyncio.run(go())


def read_topic(cluster, topic: topics.Topic, until, timeout_s: float = 20.0) -> list:
    """Records of a topic from the start, until `until(records)` holds or the time is up."""
    from aiokafka import AIOKafkaConsumer

    async def go() -> list:
        consumer = AIOKafkaConsumer(cluster.topic_name(topic), bootstrap_servers=cluster.bootstrap,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        records: list = []
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not until(records):
                batch = await consumer.getmany(timeout_ms=300)
                records += [r for rs in batch.values() for r in rs]
        finally:
            await consumer.stop()
        return records

    return asyncio.run(go())


def dead_letter_reason(cluster, value: bytes, timeout_s: float = 20.0) -> str:
    found = [r for r in read_topic(cluster, topics.DEADLETTER,
                                   lambda rs: any(r.value == value for r in rs), timeout_s)
             if r.value == value]
    assert found, "the record was not dead-lettered"
    return dict(found[0].headers)["x-frenzy-reason"].decode()


def encoded(payload) -> tuple[bytes, list]:
    value, headers = events.encode(events.envelope(payload))
    return value, headers


# ----- gRPC: identity, tenants, limits --------------------------------------------------------------
def test_cross_tenant_access_is_denied_without_leaking_existence(cluster, store):
    with tenant_client(cluster, store, "team-a") as a, tenant_client(cluster, store, "team-b") as b, \
            cluster.client() as admin:
        job_id = a.submit(spec("a-job"))
        assert a.get(job_id).tenant == "team-a"
        for call in (lambda: b.get(job_id), lambda: b.cancel(job_id),
                     lambda: next(iter(b.watch(job_id, timeout_s=5)))):
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert err.value.details() == f"job_id: no job {job_id!r}"  # same as a missing id
        with pytest.raises(grpc.RpcError) as missing:
            b.get("no-such-job")
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert job_id not in {j.id for j in b.list()}
        assert job_id in {j.id for j in a.list()} and job_id in {j.id for j in admin.list()}
        assert all(job_id not in n.running_jobs for n in b.list_nodes())
        assert all(t.running_jobs == 0 and t.queued_jobs == 0 for t in b.cluster_summary().gpu_types)
        wait_state(a, job_id, TERMINAL)


def test_a_missing_or_wrong_token_is_unauthenticated_in_the_client_and_the_cli(cluster):
    for token in ("wrong.token", "nonsense"):
        with FrenzyClient(cluster.grpc_address, token=token, ca_pem=cluster.security.ca_pem) as bad:
            with pytest.raises(grpc.RpcError) as err:
                bad.list()
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    channel = grpc.secure_channel(cluster.grpc_address, grpc.ssl_channel_credentials(
        cluster.security.ca_pem.encode()))
    with pytest.raises(grpc.RpcError) as err:  # no token at all
        services_pb2_grpc_stub(channel).ListJobs(services_pb2.ListJobsRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    channel.close()
    env = {**os.environ, "FRENZY_ADDR": cluster.grpc_address, "FRENZY_TOKEN": "wrong.token"}
    for args in (["status"], ["nodes"], ["cluster"], ["cancel", "x"]):
        out = subprocess.run([sys.executable, "-m", "frenzy.tools.cli", *args], capture_output=True,
                             text=True, env=env, timeout=60)
        assert out.returncode != 0 and "not authenticated" in out.stderr, (args, out.stderr)
    env.pop("FRENZY_TOKEN")  # the CLI finds the cluster's own config by its address
    out = subprocess.run([sys.executable, "-m", "frenzy.tools.cli", "nodes", "--json"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr


def services_pb2_grpc_stub(channel):
    from frenzy.v1 import services_pb2_grpc

    return services_pb2_grpc.JobServiceStub(channel)


def test_a_1_mib_request_is_invalid_argument(cluster):
    with cluster.client() as client:
        with pytest.raises(grpc.RpcError) as err:
            client.submit(spec("huge", env={"PAYLOAD": "x" * (1024 * 1024)}))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("request:")
        with pytest.raises(grpc.RpcError) as err:
            client.submit(spec("big-env", env={"PAYLOAD": "x" * 100_000}))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("spec.env.PAYLOAD")
        assert client.list_nodes()  # the orchestrator is still there


def test_a_job_id_cannot_escape_and_the_server_opens_no_client_path(cluster):
    with cluster.client() as client:
        for job_id in ("../../x", "a/b", ".."):
            with pytest.raises(grpc.RpcError) as err:
                client.submit(spec("escape"), job_id=job_id)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith("job_id:")
        answers = set()
        for path in ("/etc/passwd", "/no/such/file.json"):
            request = services_pb2.SubmitJobRequest(spec=types_pb2.JobSpec(
                name="p", model=path, training=spec().training))
            with pytest.raises(grpc.RpcError) as err:
                client._jobs.SubmitJob(request, timeout=10, metadata=client._metadata)  # raw: the client would inline a file
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            answers.add(err.value.details())
        assert len(answers) == 1 and "opens no paths" in answers.pop()  # no existence oracle
    assert not list(cluster.workdir.parent.glob("x.*"))


def test_quotas_and_rate_limits_are_enforced(cluster, store):
    # All four A100s busy (a job the cluster cannot hold at all fails as unschedulable instead
    # of waiting, so the queued job waits behind this one).
    with cluster.client() as admin:
        blocker = admin.submit(spec("a100-blocker", entrypoint=["sleep", "120"],
                                    constraints=types_pb2.Constraints(gpu_types=["A100-80GB"], min_gpus=4)))
        wait_state(admin, blocker, {types_pb2.RUNNING})
        try:
            with tenant_client(cluster, store, "team-q", TenantPolicy(max_queued_jobs=1, max_gpus=2)) as q:
                # Only A100s would do, and all are busy: the job waits in the queue.
                waiting = q.submit(spec("waits", constraints=types_pb2.Constraints(gpu_types=["A100-80GB"])))
                wait_state(q, waiting, {types_pb2.QUEUED})
                with pytest.raises(grpc.RpcError) as err:
                    q.submit(spec("second"))
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "queued" in err.value.details()
                q.cancel(waiting)
                with pytest.raises(grpc.RpcError) as err:
                    q.submit(spec("wide", constraints=types_pb2.Constraints(min_gpus=4)))
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "at most 2" in err.value.details()
                with pytest.raises(grpc.RpcError) as err:
                    q.submit(spec("shell", entrypoint=["sh", "-c", "id"]))
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        finally:
            admin.cancel(blocker)
    with tenant_client(cluster, store, "team-r", TenantPolicy(requests_per_s=0.1, burst=2)) as r:
        r.list()
        r.list()
        with pytest.raises(grpc.RpcError) as err:
            r.list()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# ----- Kafka: signed records ---------------------------------------------------------------------
def _running_sleeper(client: FrenzyClient) -> types_pb2.Job:
    job_id = client.submit(spec("sleeper", entrypoint=["sleep", "120"]))
    return wait_state(client, job_id, {types_pb2.RUNNING})


def test_forged_replayed_expired_and_misrouted_agent_commands_are_dead_lettered(cluster, tmp_path):
    node = cluster.node_ids[0]
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    forged = events_pb2.LaunchJob(job_id="forged", node_id=node, attempt=0, gpu_indices=[0],
                                  world_size=1, spec=types_pb2.JobSpec(entrypoint=["touch", str(marker)]))
    value, headers = encoded(forged)
    produce(cluster, topics.AGENT_COMMANDS, node.encode(), value, headers)
    assert "unsigned" in dead_letter_reason(cluster, value)

    key = load_or_create_orchestrator_key(cluster.security.directory)
    expired_signer = signing.Ed25519Signer(key, signing.ORCHESTRATOR_SIGNER, {topics.AGENT_COMMANDS.name: -1})
    value, headers = encoded(forged)
    produce(cluster, topics.AGENT_COMMANDS, node.encode(), value,
            headers + expired_signer.headers(topics.AGENT_COMMANDS.name, node.encode(), value))
    assert "expired" in dead_letter_reason(cluster, value)

    rogue = signing.Ed25519Signer(signing.new_private_key(), signing.ORCHESTRATOR_SIGNER,
                                  {topics.AGENT_COMMANDS.name: 60})
    value, headers = encoded(forged)
    produce(cluster, topics.AGENT_COMMANDS, node.encode(), value,
            headers + rogue.headers(topics.AGENT_COMMANDS.name, node.encode(), value))
    assert "forged" in dead_letter_reason(cluster, value)

    signer = signing.Ed25519Signer(key, signing.ORCHESTRATOR_SIGNER, {topics.AGENT_COMMANDS.name: 60})
    misrouted = events_pb2.StopJob(job_id="x", node_id=cluster.node_ids[1], reason="test")
    value, headers = encoded(misrouted)
    produce(cluster, topics.AGENT_COMMANDS, node.encode(), value,
            headers + signer.headers(topics.AGENT_COMMANDS.name, node.encode(), value))
    assert "not for this node" in dead_letter_reason(cluster, value)

    # Replay a real command the orchestrator sent, byte for byte with its signature.
    with cluster.client() as client:
        job = _running_sleeper(client)
        launches = read_topic(cluster, topics.AGENT_COMMANDS, lambda rs: any(
            job.id.encode() in (r.value or b"") for r in rs))
        real = next(r for r in launches if job.id.encode() in (r.value or b""))
        produce(cluster, topics.AGENT_COMMANDS, real.key, real.value, list(real.headers))
        assert "replayed" in dead_letter_reason(cluster, real.value)
        client.cancel(job.id)
    assert not marker.exists()


def test_forged_status_and_heartbeats_are_ignored(cluster):
    with cluster.client() as client:
        job = _running_sleeper(client)
        node = job.assignments[0].node_id
        fake = events_pb2.JobStatusChanged(job_id=job.id, node_id=node, attempt=job.attempt,
                                           state=types_pb2.SUCCEEDED, source=events_pb2.AGENT,
                                           reason="forged success")
        value, headers = encoded(fake)
        produce(cluster, topics.JOBS_STATUS, job.id.encode(), value, headers)
        assert "unsigned" in dead_letter_reason(cluster, value)

        # Another node's real agent key cannot speak for this node either.
        other = next(n for n in cluster.node_ids if n != node)
        other_key = signing.load_private_key(
            (cluster.workdir / "agents" / ".keys" / other / "agent.key").read_bytes())
        impostor = signing.Ed25519Signer(other_key, signing.node_signer(other), {
            topics.JOBS_STATUS.name: 60, topics.NODES_HEARTBEATS.name: 60})
        value, headers = encoded(fake)
        produce(cluster, topics.JOBS_STATUS, job.id.encode(), value,
                headers + impostor.headers(topics.JOBS_STATUS.name, job.id.encode(), value))
        assert f"not by node {node!r}" in dead_letter_reason(cluster, value)

        ghost = events_pb2.NodeHeartbeat(node_id="ghost-node", host="10.6.6.6", sequence=1, gpus=[
            types_pb2.GpuStatus(index=i, gpu_type="H100-80GB", health=types_pb2.HEALTHY) for i in range(8)])
        value, headers = encoded(ghost)
        produce(cluster, topics.NODES_HEARTBEATS, b"ghost-node", value, headers)
        assert "unsigned" in dead_letter_reason(cluster, value)
        value, headers = encoded(ghost)
        produce(cluster, topics.NODES_HEARTBEATS, b"ghost-node", value,
                headers + impostor.headers(topics.NODES_HEARTBEATS.name, b"ghost-node", value))
        assert "not by node 'ghost-node'" in dead_letter_reason(cluster, value)

        assert client.get(job.id).state == types_pb2.RUNNING
        assert "ghost-node" not in {n.id for n in client.list_nodes()}
        assert client.cancel(job.id).state == types_pb2.CANCELLED


def test_unsigned_forged_and_replayed_pipeline_records_are_dead_lettered(cluster, store):
    topic = topics.JOBS_SUBMITTED.name
    key_id, secret = cluster.security.create_pipeline_key("team-p")

    def record(job_id: str) -> bytes:
        return json.dumps({"jobId": job_id, "spec": {"name": "p", "model": "gpt2", "training": {
            "seqLen": 512, "globalBatchSize": 8, "tokens": "5000000"}}}).encode()

    json_header = [("content-type", b"application/json")]
    unsigned = record("p-unsigned")
    produce(cluster, topics.JOBS_SUBMITTED, b"p-unsigned", unsigned, json_header)
    assert "unsigned" in dead_letter_reason(cluster, unsigned)
    forged = record("p-forged")
    produce(cluster, topics.JOBS_SUBMITTED, b"p-forged", forged, json_header + signing.pipeline_headers(
        key_id, b"a guess", topic, b"p-forged", forged))
    assert "forged" in dead_letter_reason(cluster, forged)
    escaping = record("../../escape")
    produce(cluster, topics.JOBS_SUBMITTED, b"../../escape", escaping, json_header + signing.pipeline_headers(
        key_id, secret, topic, b"../../escape", escaping))
    assert "job_id" in dead_letter_reason(cluster, escaping)

    good = record("p-good")
    headers = json_header + signing.pipeline_headers(key_id, secret, topic, b"p-good", good)
    produce(cluster, topics.JOBS_SUBMITTED, b"p-good", good, headers)
    with tenant_client(cluster, store, "team-p") as owner:
        deadline = time.monotonic() + 30
        while True:
            try:
                owner.get("p-good")
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline, "the signed pipeline job never arrived"
                time.sleep(0.2)
        assert wait_state(owner, "p-good", TERMINAL).state == types_pb2.SUCCEEDED
        assert owner.get("p-good").tenant == "team-p"
    produce(cluster, topics.JOBS_SUBMITTED, b"p-good", good, headers)  # the same bytes again
    assert "replayed" in dead_letter_reason(cluster, good)


def test_the_scheduler_keeps_a_tenant_within_its_gpu_quota(cluster, store):
    one_gpu = types_pb2.JobSpec(name="long", model="gpt2", constraints=types_pb2.Constraints(max_gpus=1),
                                training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8,
                                                                  tokens=2_000_000_000))
    with tenant_client(cluster, store, "team-g", TenantPolicy(max_gpus=1)) as g:
        first = g.submit(one_gpu)
        wait_state(g, first, {types_pb2.RUNNING})
        second = g.submit(one_gpu)
        wait_state(g, second, {types_pb2.QUEUED})
        time.sleep(2.0)  # free GPUs abound; only the quota keeps it waiting
        assert g.get(second).state == types_pb2.QUEUED
        g.cancel(first)
        wait_state(g, second, HOLDING)
        g.cancel(second)


def test_token_create_list_and_revoke_through_the_cli(cluster):
    def cli(*args: str, token: str = "") -> subprocess.CompletedProcess:
        env = {**os.environ, "FRENZY_ADDR": cluster.grpc_address, "FRENZY_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "frenzy.tools.cli", *args], capture_output=True,
                              text=True, env=env, timeout=60)

    security = ["--security-dir", str(cluster.security.directory)]
    created = cli("token", "create", "--tenant", "team-cli", *security)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    listed = json.loads(cli("token", "list", "--json", *security).stdout)
    row = next(r for r in listed if r["id"] == token.split(".")[0])
    assert (row["tenant"], row["role"], row["kind"]) == ("team-cli", "user", "api")
    assert token.split(".")[1] not in json.dumps(listed)  # never the secret
    assert cli("status", "--json", token=token).returncode == 0
    assert cli("token", "revoke", row["id"], *security).returncode == 0
    refused = cli("status", token=token)
    assert refused.returncode == 1 and "not authenticated" in refused.stderr


def test_a_job_gets_no_broker_address_and_no_credentials(cluster, tmp_path):
    dump = tmp_path / "env.json"
    script = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"
    with cluster.client() as client:
        job_id = client.submit(spec("env-dump", entrypoint=[sys.executable, "-c", script, str(dump)]))
        assert wait_state(client, job_id, TERMINAL).state == types_pb2.SUCCEEDED
    env = json.loads(dump.read_text())
    assert {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "FRENZY_JOB_ID"} <= env.keys()
    leaked = {k for k in env if k.startswith("KAFKA") or k in (
        "FRENZY_JOIN_TOKEN", "FRENZY_ORCHESTRATOR_KEY", "FRENZY_SECURITY_DIR", "FRENZY_TOKEN")}
    assert not leaked, leaked
    assert cluster.bootstrap not in json.dumps(env)
