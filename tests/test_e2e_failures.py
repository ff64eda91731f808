"""Failure paths through the real system: a node whose heartbeats stop, an out-of-memory job,
exit codes a user program chose, and inputs that used to park a job forever."""
from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

import grpc
import pytest

from frenzy import topics
from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.security.signing import pipeline_headers
from frenzy.v1 import types_pb2
from jobwatch import process_group_exists

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster("failures", "cluster_failover.yaml",
                         extra_env={"FRENZY_NODE_TIMEOUT_S": "3", "FRENZY_PLAN_TIMEOUT_S": "20",
                                    "FRENZY_LAUNCH_TIMEOUT_S": "20"})


def spec(name: str, entrypoint: list[str]) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name=name, model="gpt2", entrypoint=entrypoint,
                             constraints=types_pb2.Constraints(max_gpus=1),
                             training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8, tokens=1_000_000))


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_heartbeat_loss_requeues_and_completes_on_another_node(cluster):
    with FrenzyClient(cluster.grpc_address) as client:
        # Attempt 0 sleeps long; the retry (attempt 1) exits at once.
        script = "import os, sys, time; time.sleep(120 if os.environ['FRENZY_ATTEMPT'] == '0' else 0.5)"
        job_id = client.submit(spec("survivor", [sys.executable, "-c", script]))
        job = wait_for(lambda: (j := client.get(job_id)).state == types_pb2.RUNNING and j, 30, "RUNNING")
        first_node = job.assignments[0].node_id
        cluster.stop_process(f"agent-{first_node}", signal.SIGKILL)  # heartbeats stop
        done = wait_for(lambda: (j := client.get(job_id)).state in TERMINAL and j, 60, "terminal state")
        assert done.state == types_pb2.SUCCEEDED, done.reason
        assert done.attempt == 1 and done.assignments[0].node_id != first_node
        lost = [n for n in client.list_nodes() if n.id == first_node][0]
        assert lost.state == types_pb2.NODE_LOST


def test_oom_fails_the_attempt_replans_and_succeeds(cluster):
    with FrenzyClient(cluster.grpc_address) as client:
        # Over its memory limit on attempt 0: the trainer's OOM status file and exit code (3).
        script = ("import os, sys; from frenzy.outcomes import write_status\n"
                  "if os.environ['FRENZY_ATTEMPT'] == '0':\n"
                  "    write_status('OOM', 'emulated'); sys.exit(3)")
        job_id = client.submit(spec("oom-then-ok", [sys.executable, "-c", script]))
        states = [(j.state, j.reason, j.attempt) for j in client.watch(job_id, timeout_s=60)]
        assert states[-1][0] == types_pb2.SUCCEEDED, states
        assert any(reason.startswith("OOM") for _, reason, _ in states), states
        assert states[-1][2] == 1


@pytest.mark.parametrize("code", [3, 4])
def test_a_user_programs_exit_code_3_or_4_fails_the_job_with_that_code(cluster, code):
    """Not re-planned as OOM nor retried as a rendezvous failure: no status file said so."""
    with FrenzyClient(cluster.grpc_address) as client:
        job_id = client.submit(spec(f"exits-{code}", [sys.executable, "-c", f"raise SystemExit({code})"]))
        done = wait_for(lambda: (j := client.get(job_id)).state in TERMINAL and j, 60, "terminal state")
        assert (done.state, done.reason, done.exit_code, done.attempt) == \
            (types_pb2.FAILED, f"exit code {code}", code, 0)


def _produce_json(cluster, body: dict) -> None:
    """A pipeline's JobSubmitted straight onto Kafka, signed with a pipeline key of the cluster's
    default tenant (frenzy/security: unsigned records are dead-lettered)."""
    from aiokafka import AIOKafkaProducer

    key_id, secret = cluster.security.create_pipeline_key()
    value, key = json.dumps(body).encode(), body["jobId"].encode()
    headers = [("content-type", b"application/json")] + pipeline_headers(
        key_id, secret, topics.JOBS_SUBMITTED.name, key, value)

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, enable_idempotence=False)
        await producer.start()
        try:
            await producer.send_and_wait(cluster.topic_name(topics.JOBS_SUBMITTED), value, key=key,
                                         headers=headers)
        finally:
            await producer.stop()

    asyncio.run(go())


def _ends_with_a_reason(client: FrenzyClient, job_id: str, timeout_s: float = 45):
    """The job's terminal state, reached within the timeout (the test's deadline)."""
    def terminal():
        try:
            job = client.get(job_id)
        except grpc.RpcError:
            return None  # a pipeline record not read yet
        return job if job.state in TERMINAL else None
    return wait_for(terminal, timeout_s, f"{job_id} to end")


def _submit_or_refused(client: FrenzyClient, spec_: types_pb2.JobSpec, job_id: str = "") -> str:
    """Submit; "" if the edge refuses the input outright (also a clear end for it)."""
    try:
        return client.submit(spec_, job_id)
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        return ""


QUICK = [sys.executable, "-c", "pass"]


@pytest.mark.parametrize("name,env,job_id", [
    ("env-key-with-equals", {"A=B": "1"}, ""),
    ("env-value-with-nul", {"A": "nul\x00byte"}, ""),
    ("long-job-id", {}, "j" * 256),
    ("slash-job-id", {}, "team/a/b"),
])
def test_inputs_that_broke_the_launch_end_their_job_with_a_reason(cluster, name, env, job_id):
    with FrenzyClient(cluster.grpc_address) as client:
        job_spec = spec(name, QUICK)
        job_spec.env.update(env)
        job_id = _submit_or_refused(client, job_spec, job_id)
        if job_id:
            done = _ends_with_a_reason(client, job_id)
            assert done.reason and (done.state == types_pb2.SUCCEEDED or "launch failed" in done.reason)


def test_no_job_waits_forever_for_gpus_the_cluster_does_not_have(cluster):
    with FrenzyClient(cluster.grpc_address) as client:
        too_many = spec("more-gpus-than-the-cluster", QUICK)
        too_many.constraints.max_gpus, too_many.constraints.min_gpus = 0, 16  # the cluster has 8
        wrong_type = spec("missing-gpu-type", QUICK)
        wrong_type.constraints.gpu_types.append("H100-80GB")  # the cluster has A100s only
        for job_spec in (too_many, wrong_type):
            done = _ends_with_a_reason(client, client.submit(job_spec))
            assert done.state == types_pb2.FAILED and "unschedulable" in done.reason, done.reason


def test_an_unplannable_config_json_on_kafka_fails_with_a_reason(cluster):
    config = json.dumps({"model_type": "gpt2", "n_layer": 10**8, "n_embd": 10**9, "n_head": 1,
                         "vocab_size": 10**9, "n_positions": 1024})
    job_id = f"absurd-{int(time.time() * 1000)}"
    # An inline config.json: the services open no model paths (frenzy/security).
    _produce_json(cluster, {"jobId": job_id, "spec": {"name": "absurd", "model": "absurd",
                                                      "modelConfigJson": config,
                                                      "training": {"seqLen": 512, "globalBatchSize": 8,
                                                                   "tokens": "1000000"}}})
    with FrenzyClient(cluster.grpc_address) as client:
        done = _ends_with_a_reason(client, job_id)
        assert done.state == types_pb2.FAILED and done.reason, done


def test_a_reused_job_id_with_another_spec_is_refused_and_the_first_job_finishes(cluster):
    with FrenzyClient(cluster.grpc_address) as client:
        job_id = client.submit(spec("first", [sys.executable, "-c", "import time; time.sleep(1)"]))
        with pytest.raises(grpc.RpcError) as refused:
            client.submit(spec("second", QUICK), job_id)
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert client.submit(client.get(job_id).spec, job_id) == job_id  # the same spec: a retry
        done = _ends_with_a_reason(client, job_id)
        assert done.state == types_pb2.SUCCEEDED and done.spec.name == "first"


def test_a_node_that_returns_after_being_declared_lost_is_fenced(cluster):
    """Its agent is frozen past the node timeout while attempt 0 runs there; attempt 1 runs on
    the other node. When the agent thaws, still running attempt 0, it is told to stop it."""
    from frenzy_agent.executor import job_dir_name

    with FrenzyClient(cluster.grpc_address) as client:
        for name in cluster.dead():  # an earlier test's killed agent: attempt 1 needs its node
            cluster.restart(name)
        wait_for(lambda: all(n.state == types_pb2.NODE_READY for n in client.list_nodes()), 30,
                 "every node ready")
        script = "import os, time; time.sleep(120 if os.environ['FRENZY_ATTEMPT'] == '0' else 4)"
        job_id = client.submit(spec("fenced", [sys.executable, "-c", script]))
        job = wait_for(lambda: (j := client.get(job_id)).state == types_pb2.RUNNING and j, 30, "RUNNING")
        node = job.assignments[0].node_id
        state = cluster.workdir / "agents" / node / job_dir_name(job_id, 0) / "state.json"
        pgid = json.loads(state.read_text())["pgid"]
        agent = cluster.processes[f"agent-{node}"]
        agent.send_signal(signal.SIGSTOP)  # cut off: no heartbeats, its job runs on
        try:
            wait_for(lambda: client.get(job_id).attempt == 1, 30, "the retry")
        finally:
            agent.send_signal(signal.SIGCONT)
        wait_for(lambda: not process_group_exists(pgid), 30, "the stale attempt 0 to be stopped")
        done = wait_for(lambda: (j := client.get(job_id)).state in TERMINAL and j, 60, "terminal")
        assert done.state == types_pb2.SUCCEEDED and done.attempt == 1, done.reason
        assert done.assignments[0].node_id != node
