"""Fuzzing a running cluster: hypothesis-driven gRPC requests and random or mutated records.

Used by the short fuzz in `make test` (tests/test_e2e_fuzz.py) and the long one in
bench/fuzz.py. What must hold afterwards: no gRPC call answered INTERNAL or UNKNOWN, no
service process exited (a consumer that stops takes its process down), every record no
consumer can decode is on the dead-letter topic with a reason, and a new job still runs to
the end.

Fuzzed jobs are submitted by a tenant whose allow-list holds the reference trainer only, so a
random argv is refused rather than executed.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from frenzy import events, offsetgaps, topics
from frenzy.catalog.gpus import gpu_catalog
from frenzy.catalog.models import model_catalog
from frenzy.bus import records_in_order
from frenzy.jobstates import TERMINAL
from frenzy.security import signing
from frenzy.security.limits import MAX_RECORD_BYTES
from frenzy.security.store import SecurityStore, TenantPolicy
from frenzy.v1 import events_pb2, services_pb2, services_pb2_grpc, types_pb2

FUZZ_TENANT = "fuzz"
BAD_CODES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
# Topics a service consumes while running. frenzy.orchestrator.state is read only at a
# restart and frenzy.deadletter by no one, so they are not fuzzed here.
FUZZED_TOPICS = (topics.JOBS_SUBMITTED, topics.JOBS_PLANNED, topics.JOBS_PLACED, topics.JOBS_STATUS,
                 topics.NODES_HEARTBEATS, topics.CLUSTER_EVENTS, topics.AGENT_COMMANDS)


@dataclass
class FuzzReport:
    grpc_requests: int = 0
    codes: Counter = field(default_factory=Counter)
    bad_answers: list[str] = field(default_factory=list)  # INTERNAL / UNKNOWN, with the request
    records: Counter = field(default_factory=Counter)  # topic -> records produced
    undecodable: dict[bytes, str] = field(default_factory=dict)  # value -> "topic[partition]@offset"
    dead_lettered: int = 0
    missing_dead_letters: list[str] = field(default_factory=list)
    dead_processes: list[str] = field(default_factory=list)
    final_job_state: str = ""
    grpc_s: float = 0.0
    records_s: float = 0.0

    def ok(self) -> bool:
        return (not self.bad_answers and not self.missing_dead_letters and not self.dead_processes
                and self.final_job_state == "SUCCEEDED")

    def summary(self) -> dict:
        return {"grpc_requests": self.grpc_requests,
                "grpc_codes": {c.name: n for c, n in self.codes.most_common()},
                "internal_or_unknown": len(self.bad_answers), "records": dict(self.records),
                "undecodable_records": len(self.undecodable), "dead_lettered": self.dead_lettered,
                "undecodable_not_dead_lettered": len(self.missing_dead_letters),
                "processes_exited": self.dead_processes, "final_job": self.final_job_state,
                "grpc_s": round(self.grpc_s, 1), "records_s": round(self.records_s, 1), "ok": self.ok()}


# ----- gRPC ---------------------------------------------------------------------------------------
def _strategies():
    from hypothesis import strategies as st

    int64 = st.integers(-2**63, 2**63 - 1)
    small = st.integers(-5, 10_000)
    int32 = st.integers(-2**31, 2**31 - 1)
    text = st.text(max_size=64)
    names = st.one_of(st.sampled_from(list(model_catalog())), text,
                      st.sampled_from(["/etc/passwd", "../../x.json", "config.json", "/dev/zero", ""]))
    config = st.one_of(st.just(""), text, st.builds(
        lambda d: json.dumps(d), st.dictionaries(st.sampled_from(
            ["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
             "intermediate_size", "n_embd", "n_layer", "n_head", "n_positions"]),
            st.one_of(small, st.sampled_from(["llama", "gpt2", "bert"]), st.none()), max_size=10)))
    training = st.builds(
        types_pb2.TrainingConfig, seq_len=st.one_of(small, int64), global_batch_size=st.one_of(small, int64),
        tokens=st.one_of(st.just(0), small, int64), steps=st.one_of(st.just(0), st.integers(1, 20), int64),
        precision=st.one_of(st.sampled_from(["bf16", "fp16", "fp32"]), text),
        optimizer=st.one_of(st.sampled_from(["adamw", "sgd"]), text),
        dropout=st.floats(allow_nan=True, allow_infinity=True))
    constraints = st.builds(
        types_pb2.Constraints,
        gpu_types=st.lists(st.one_of(st.sampled_from(list(gpu_catalog())), text), max_size=4),
        max_gpus=st.one_of(small, int32), min_gpus=st.one_of(small, int32))
    entrypoint = st.one_of(st.just([]), st.lists(text, max_size=4),
                           st.just(["python", "-m", "frenzy_trainer"]))
    spec = st.builds(types_pb2.JobSpec, name=st.one_of(text, st.just("fuzz")), model=names,
                     training=training, constraints=constraints, entrypoint=entrypoint,
                     env=st.dictionaries(text, text, max_size=4), model_config_json=config)
    job_id = st.one_of(st.just(""), text, st.sampled_from(["../../x", "job-1", "a" * 200, "ok-id"]))
    token = st.sampled_from(["user", "user", "user", "admin", "none", "garbage"])
    return st, spec, job_id, token, st.lists(st.sampled_from(list(types_pb2.JobState.values())), max_size=3)


def fuzz_grpc(cluster, requests: int, seed: int = 0) -> FuzzReport:
    """`requests` hypothesis-generated calls over every RPC, by the fuzz tenant, an admin, no
    token and a garbage token."""
    from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings

    report = FuzzReport()
    store = SecurityStore(cluster.security.directory)
    store.set_tenant(FUZZ_TENANT, TenantPolicy(requests_per_s=0))
    _, user_token = store.create("api", FUZZ_TENANT, "user", "fuzz")
    tokens = {"user": user_token, "admin": cluster.security.admin_token, "none": "",
              "garbage": "deadbeef.not-a-token"}
    channel = grpc.secure_channel(cluster.grpc_address, grpc.ssl_channel_credentials(
        cluster.security.ca_pem.encode()))
    jobs = services_pb2_grpc.JobServiceStub(channel)
    clusters = services_pb2_grpc.ClusterServiceStub(channel)
    predictor = services_pb2_grpc.PredictorServiceStub(channel)
    st, spec, job_id, token, states = _strategies()
    calls = st.one_of(
        st.tuples(st.just("SubmitJob"), st.builds(services_pb2.SubmitJobRequest, spec=spec, job_id=job_id)),
        st.tuples(st.just("GetJob"), st.builds(services_pb2.GetJobRequest, job_id=job_id)),
        st.tuples(st.just("ListJobs"), st.builds(services_pb2.ListJobsRequest, states=states)),
        st.tuples(st.just("CancelJob"), st.builds(services_pb2.CancelJobRequest, job_id=job_id)),
        st.tuples(st.just("WatchJob"), st.builds(services_pb2.WatchJobRequest, job_id=job_id)),
        st.tuples(st.just("Predict"), st.builds(services_pb2.PredictRequest, spec=spec, gpu_types=st.lists(
            st.one_of(st.sampled_from(list(gpu_catalog())), st.text(max_size=20)), max_size=3))),
        st.tuples(st.just("GetCluster"), st.just(services_pb2.GetClusterRequest())),
        st.tuples(st.just("ListNodes"), st.just(services_pb2.ListNodesRequest())))
    methods = {"SubmitJob": jobs.SubmitJob, "GetJob": jobs.GetJob, "ListJobs": jobs.ListJobs,
               "CancelJob": jobs.CancelJob, "WatchJob": jobs.WatchJob, "Predict": predictor.Predict,
               "GetCluster": clusters.GetCluster, "ListNodes": clusters.ListNodes}

    @hypothesis_seed(seed)  # the same requests for the same seed: a failure reproduces
    @settings(max_examples=requests, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(call=calls, who=token)
    def one(call, who) -> None:
        name, request = call
        metadata = (("authorization", f"Bearer {tokens[who]}"),) if tokens[who] else ()
        report.grpc_requests += 1
        try:
            answer = methods[name](request, timeout=10, metadata=metadata)
            if name == "WatchJob":
                next(iter(answer))  # the first snapshot; the stream is then dropped
            report.codes[grpc.StatusCode.OK] += 1
        except grpc.RpcError as err:
            report.codes[err.code()] += 1
            if err.code() in BAD_CODES:
                report.bad_answers.append(f"{name} as {who}: {err.code().name} {err.details()} "
                                          f"request={str(request)[:300]!r}")

    started = time.monotonic()
    one()
    report.grpc_s = time.monotonic() - started
    channel.close()
    return report


# ----- records ------------------------------------------------------------------------------------
def _payload_for(topic: topics.Topic, rng: random.Random, node_ids: list[str]):
    job_id = rng.choice(["job-x", "fuzz-job", "../../evil", "", "j" * 300])
    node = rng.choice(node_ids + ["ghost"])
    options = {
        topics.JOBS_SUBMITTED.name: lambda: events_pb2.JobSubmitted(
            job_id=job_id, spec=types_pb2.JobSpec(name="f", model="gpt2", entrypoint=["sh", "-c", "id"]),
            tenant="admin-pretender"),
        topics.JOBS_PLANNED.name: lambda: events_pb2.JobPlanned(
            job_id=job_id, options=[types_pb2.PlanOption(gpu_type="T4", num_gpus=rng.randint(-3, 9))]),
        topics.JOBS_PLACED.name: lambda: events_pb2.JobPlaced(
            job_id=job_id, assignments=[types_pb2.GpuAssignment(node_id=node, gpu_indices=[0, 1])]),
        topics.JOBS_STATUS.name: lambda: events_pb2.JobStatusChanged(
            job_id=job_id, node_id=node, state=rng.choice(list(types_pb2.JobState.values())),
            source=rng.choice([events_pb2.AGENT, events_pb2.ORCHESTRATOR]), attempt=rng.randint(-1, 3)),
        topics.NODES_HEARTBEATS.name: lambda: rng.choice([
            events_pb2.NodeHeartbeat(node_id=node, sequence=rng.randint(0, 10**9),
                                     gpus=[types_pb2.GpuStatus(index=0, gpu_type="H100-80GB")]),
            events_pb2.CheckpointsDeleted(job_id=job_id, node_id=node)]),
        topics.CLUSTER_EVENTS.name: lambda: events_pb2.GpuAvailabilityChanged(
            node_id=node, gpu_type="H100-80GB", gpus_total=8, free_gpu_indices=range(8), version=2**62),
        topics.AGENT_COMMANDS.name: lambda: rng.choice([
            events_pb2.LaunchJob(job_id=job_id, node_id=node, gpu_indices=[0],
                                 spec=types_pb2.JobSpec(entrypoint=["touch", "/tmp/frenzy-fuzz-pwned"])),
            events_pb2.StopJob(job_id=job_id, node_id=node, reason="fuzz"),
            events_pb2.DeleteCheckpoints(job_id=job_id, node_id=node, checkpoint_uri="/")]),
    }
    return options[topic.name]()


def _mutate(value: bytes, rng: random.Random) -> bytes:
    data = bytearray(value)
    for _ in range(rng.randint(1, 8)):
        action = rng.random()
        if action < 0.5 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif action < 0.7 and data:
            del data[rng.randrange(len(data)):]
        else:
            data[rng.randrange(len(data) + 1):0] = rng.randbytes(rng.randint(1, 16))
    return bytes(data)


def fuzz_records(rng: random.Random, topic: topics.Topic, count: int, node_ids: list[str],
                 oversized: int = 1) -> list[tuple[bytes, bytes, list]]:
    """(key, value, headers) records: random bytes, mutated envelopes, bad JSON, unsigned or
    forged-signature envelopes, and `oversized` records past the record limit."""
    out = []
    for _ in range(count):
        # Commands to a node id (a partition no agent owns has no reader at all).
        key = (rng.choice(node_ids) if topic == topics.AGENT_COMMANDS
               else rng.choice(["k", "job-x", "ghost", ""] + node_ids)).encode()
        kind = rng.randrange(6)
        headers: list = []
        if kind == 0:
            value = rng.randbytes(rng.randint(1, 2000))
        elif kind == 1:
            value = _mutate(events.encode(events.envelope(_payload_for(topic, rng, node_ids)))[0], rng)
        elif kind == 2:
            value = rng.choice([b"{", b"[]", b"null", b'{"jobId": 5}', b'{"spec": "x"}',
                                b'{"eventId": "", "jobSubmitted": {}}', json.dumps(
                                    {"x": rng.random()}).encode()])
            headers = [("content-type", b"application/json")]
        elif kind == 3:
            value, headers = events.encode(events.envelope(_payload_for(topic, rng, node_ids)))
        elif kind == 4:
            value, headers = events.encode(events.envelope(_payload_for(topic, rng, node_ids)))
            headers += [(signing.SIGNER, rng.choice([b"orchestrator", b"node/" + key, b"tenant/x"])),
                        (signing.EXPIRES, str(int(time.time()) + 30).encode()),
                        (signing.SIG, rng.choice([b"", b"AAAA", rng.randbytes(64)])),
                        (signing.HMAC_HEADER, b"bm90IGEgbWFj")]
        else:
            value, headers = b"", []
        out.append((key, value, headers))
    for _ in range(oversized):  # keyed to a node: only its agent reads its commands' partition
        out.append((rng.choice(node_ids).encode(), b"\x0a" + rng.randbytes(MAX_RECORD_BYTES + 1024), []))
    return out


def produce_fuzz(cluster, report: FuzzReport, per_topic: int, seed: int = 0) -> None:
    from aiokafka import AIOKafkaProducer

    rng = random.Random(seed)

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, max_request_size=2 * 1024 * 1024,
                                    linger_ms=5)
        await producer.start()
        try:
            sends: list[tuple[str, bytes, bool, asyncio.Future]] = []
            for topic in FUZZED_TOPICS:
                for key, value, headers in fuzz_records(rng, topic, per_topic, cluster.node_ids):
                    sent = await producer.send(cluster.topic_name(topic), value, key=key, headers=headers)
                    sends.append((topic.name, value, _undecodable(value, headers), sent))
                    report.records[topic.name] += 1
            for name, value, undecodable, sent in sends:
                metadata = await sent  # raises if the broker refused the record
                if undecodable:  # where it landed, to name a missing dead letter
                    report.undecodable[value] = f"{name}[{metadata.partition}]@{metadata.offset}"
        finally:
            await producer.stop()

    started = time.monotonic()
    asyncio.run(go())
    report.records_s = time.monotonic() - started


def _undecodable(value: bytes, headers: list) -> bool:
    if len(value) > MAX_RECORD_BYTES:
        return True
    try:
        events.decode(value, headers, json_payload="job_submitted")
        return False
    except events.MalformedEvent:
        return True


def check_dead_letters(cluster, report: FuzzReport, timeout_s: float = 120.0) -> None:
    """Every undecodable record must reach the dead-letter topic with a reason."""
    from aiokafka import AIOKafkaConsumer

    async def go() -> None:
        consumer = AIOKafkaConsumer(cluster.topic_name(topics.DEADLETTER), bootstrap_servers=cluster.bootstrap,
                                    auto_offset_reset="earliest", group_id=None,
                                    max_partition_fetch_bytes=4 * 1024 * 1024, fetch_max_bytes=16 * 1024 * 1024)
        await consumer.start()
        seen: set[bytes] = set()
        # Several services dead-letter at once, so the embedded broker can show a later dead
        # letter before a large earlier one (frenzy/offsetgaps.py): read every offset in turn.
        gaps = offsetgaps.OffsetGaps(wait_s=timeout_s)
        for tp, first in (await consumer.beginning_offsets(list(consumer.assignment()))).items():
            gaps.expected[tp] = first
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not set(report.undecodable) <= seen:
                batch = await consumer.getmany(timeout_ms=500)
                for r in await records_in_order(consumer, gaps, batch, "fuzz dead-letter reader"):
                    reason = dict(r.headers or []).get("x-frenzy-reason", b"")
                    if reason:
                        seen.add(r.value or b"")
                        report.dead_lettered += 1
        finally:
            await consumer.stop()
        report.missing_dead_letters = [f"{report.undecodable[v]}: {v[:40]!r}"
                                       for v in report.undecodable if v not in seen]

    asyncio.run(go())


def finish(cluster, report: FuzzReport, timeout_s: float = 120.0) -> None:
    """Cancel what the fuzz left running, then run one job to the end."""
    report.dead_processes = cluster.dead()
    with cluster.client(timeout_s=30) as client:
        for job in client.list():
            if job.state not in TERMINAL:
                try:
                    client.cancel(job.id)
                except grpc.RpcError:
                    pass
        job_id = client.submit(types_pb2.JobSpec(name="after-fuzz", model="gpt2", training=types_pb2.TrainingConfig(
            seq_len=512, global_batch_size=8, tokens=2_000_000)))
        deadline = time.monotonic() + timeout_s
        job = client.get(job_id)
        while job.state not in TERMINAL \
                and time.monotonic() < deadline:
            time.sleep(0.2)
            job = client.get(job_id)
        report.final_job_state = types_pb2.JobState.Name(job.state)
    report.dead_processes = cluster.dead()


def run_fuzz(cluster, grpc_requests: int, records_per_topic: int, seed: int = 0) -> FuzzReport:
    report = fuzz_grpc(cluster, grpc_requests, seed)
    produce_fuzz(cluster, report, records_per_topic, seed)
    check_dead_letters(cluster, report)
    finish(cluster, report)
    return report
