"""The whole real path on a real broker: gRPC, Kafka, predictor, scheduler, orchestrator, agents,
OS processes, and status streaming back."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from frenzy import topics
from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.security.signing import pipeline_headers
from frenzy.tools.localcluster import LOCAL_RANK_NICE
from frenzy.v1 import types_pb2
from frenzy_agent.executor import job_dir_name
from jobwatch import process_group_exists

pytestmark = pytest.mark.e2e


def small_spec(name: str = "e2e", model: str = "gpt2", entrypoint: list[str] | None = None) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name=name, model=model, entrypoint=entrypoint or [],
                             training=types_pb2.TrainingConfig(seq_len=1024, global_batch_size=8,
                                                               tokens=20_000_000))


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster("foundation")


@pytest.fixture()
def client(cluster):
    with FrenzyClient(cluster.grpc_address) as c:
        yield c


def wait_terminal(client: FrenzyClient, job_id: str, timeout_s: float = 60) -> types_pb2.Job:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(job_id)
        if job.state in TERMINAL:
            return job
        time.sleep(0.2)
    raise AssertionError(f"{job_id} not terminal after {timeout_s}s: {client.get(job_id)}")


def test_grpc_job_succeeds_and_watch_streams_states_in_order(client):
    job_id = client.submit(small_spec("watched"))
    states = [job.state for job in client.watch(job_id, timeout_s=60)]
    assert states[-1] == types_pb2.SUCCEEDED
    order = [types_pb2.SUBMITTED, types_pb2.PLANNED, types_pb2.QUEUED, types_pb2.PLACED,
             types_pb2.LAUNCHING, types_pb2.RUNNING, types_pb2.SUCCEEDED]
    seen = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen), seen
    assert types_pb2.RUNNING in seen
    job = client.get(job_id)
    assert job.option.gpu_type and job.option.num_gpus > 0 and job.progress.step == job.progress.steps


def _produce(bootstrap: str, topic: str, value: bytes, key: bytes, headers=None) -> None:
    from aiokafka import AIOKafkaProducer

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
        finally:
            await producer.stop()

    asyncio.run(go())


def test_raw_json_on_kafka_succeeds(client, cluster):
    job_id = f"pipeline-{int(time.time() * 1000)}"
    body = {"jobId": job_id, "spec": {"name": "from-pipeline", "model": "gpt2",
                                      "training": {"seqLen": 512, "globalBatchSize": 8, "tokens": "10000000"}}}
    # A pipeline signs with its tenant's key (frenzy token create --kind pipeline).
    key_id, secret = cluster.security.create_pipeline_key()
    value = json.dumps(body).encode()
    _produce(cluster.bootstrap, cluster.topic_name(topics.JOBS_SUBMITTED), value, job_id.encode(),
             [("content-type", b"application/json")]
             + pipeline_headers(key_id, secret, topics.JOBS_SUBMITTED.name, job_id.encode(), value))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.get(job_id)
            break
        except grpc.RpcError:
            time.sleep(0.2)
    assert wait_terminal(client, job_id).state == types_pb2.SUCCEEDED


def _consume_deadletter(bootstrap: str, topic: str, timeout_s: float = 20) -> list:
    from aiokafka import AIOKafkaConsumer

    async def go() -> list:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        records = []
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                records += [r for rs in batch.values() for r in rs]
                if any(r.key == b"garbage-key" for r in records):
                    break
        finally:
            await consumer.stop()
        return records

    return asyncio.run(go())


def test_garbage_goes_to_deadletter_and_consumers_keep_going(client, cluster):
    _produce(cluster.bootstrap, cluster.topic_name(topics.JOBS_SUBMITTED), b"\x00\xffnot an event",
             b"garbage-key")
    dead = _consume_deadletter(cluster.bootstrap, cluster.topic_name(topics.DEADLETTER))
    records = [r for r in dead if r.key == b"garbage-key"]
    assert records, "garbage record never reached frenzy.deadletter"
    reasons = {dict(r.headers)["x-frenzy-reason"].decode() for r in records}
    assert all("malformed" in reason for reason in reasons), reasons
    assert records[0].value == b"\x00\xffnot an event"  # nothing lost
    job_id = client.submit(small_spec("after-garbage"))
    assert wait_terminal(client, job_id).state == types_pb2.SUCCEEDED


def test_cancel_running_job_kills_its_processes(client, cluster):
    # A duration no other process on the machine has, so pgrep finds only this job's sleep.
    duration = f"{300 + time.time() % 1:.6f}"
    job_id = client.submit(small_spec("sleeper", entrypoint=["sleep", duration]))
    deadline = time.monotonic() + 30
    while client.get(job_id).state != types_pb2.RUNNING:
        assert time.monotonic() < deadline, client.get(job_id)
        time.sleep(0.1)
    state_files = list(Path(cluster.workdir / "agents").glob(f"*/{job_dir_name(job_id, 0)}/state.json"))
    assert state_files
    pgids = [json.loads(f.read_text())["pgid"] for f in state_files]
    assert all(process_group_exists(p) for p in pgids)
    # The local cluster's agents run ranks below the services' CPU priority.
    ranks_nice = os.getpriority(os.PRIO_PROCESS, 0) + LOCAL_RANK_NICE
    assert [os.getpriority(os.PRIO_PGRP, p) for p in pgids] == [ranks_nice] * len(pgids)
    assert client.cancel(job_id).state == types_pb2.CANCELLED
    deadline = time.monotonic() + 15
    while any(process_group_exists(p) for p in pgids):
        assert time.monotonic() < deadline, "job processes still alive after cancel"
        time.sleep(0.1)
    out = subprocess.run(["pgrep", "-f", f"sleep {duration}"], capture_output=True, text=True)
    assert out.stdout.strip() == "", "orphan sleep process left behind"


@pytest.mark.parametrize("spec,field", [
    (small_spec(model="no-such-model"), "model"),
    (types_pb2.JobSpec(name="neg", model="gpt2", training=types_pb2.TrainingConfig(
        seq_len=1024, global_batch_size=-4, steps=10)), "training.global_batch_size"),
    (types_pb2.JobSpec(name="range", model="gpt2", constraints=types_pb2.Constraints(min_gpus=4, max_gpus=2),
                       training=types_pb2.TrainingConfig(seq_len=1024, global_batch_size=8, steps=10)),
     "constraints.min_gpus"),
])
def test_invalid_spec_is_invalid_argument_naming_the_field(client, spec, field):
    with pytest.raises(grpc.RpcError) as err:
        client.submit(spec)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


def _cli(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frenzy.tools.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "FRENZY_ADDR": cluster.grpc_address}, timeout=60)


def test_cli_status_and_nodes_json(cluster, client, tmp_path):
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("name: cli-job\nmodel: gpt2\ntraining: {seq_len: 512, global_batch_size: 8, tokens: 5000000}\n")
    submitted = _cli(cluster, "submit", str(spec_file))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    wait_terminal(client, job_id)
    rows = json.loads(_cli(cluster, "status", "--json").stdout)
    row = next(r for r in rows if r["id"] == job_id)
    assert set(row) == {"id", "name", "state", "reason", "gpu_type", "num_gpus", "attempt", "step",
                        "checkpoint_step", "resumed_from_step"}
    assert row["state"] == "SUCCEEDED" and row["num_gpus"] > 0
    # the synthetic workload keeps no checkpoints: a first attempt from step 0
    assert (row["attempt"], row["checkpoint_step"], row["resumed_from_step"]) == (0, None, 0)
    assert row["step"] == client.get(job_id).progress.step
    nodes = json.loads(_cli(cluster, "nodes", "--json").stdout)
    assert {n["id"] for n in nodes} == set(cluster.node_ids)
    assert all(set(n) == {"id", "gpu_type", "gpus_total", "gpus_free", "state", "agent_pid",
                          "agent_restarts"} for n in nodes)
    summary = json.loads(_cli(cluster, "cluster", "--json").stdout)
    assert {t["gpu_type"]: t["total"] for t in summary["gpu_types"]} == {"A100-80GB": 4, "T4": 8}
    # The synthetic workload reports MARP's prediction as its measured peak: zero error.
    assert summary["memory_prediction"]["jobs"] >= 1
    assert summary["memory_prediction"]["mean_abs_error"] == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: gpt2\ntraining: {seq_len: 512, global_batch_size: -1, steps: 3}\n")
    result = _cli(cluster, "submit", str(bad))
    assert result.returncode == 2 and "global_batch_size" in result.stderr
