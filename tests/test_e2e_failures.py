"""Failure paths through the real system: a node whose heartbeats stop, and an out-of-memory job."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from frenzy.broker import free_port
from frenzy.client import FrenzyClient
from frenzy.localcluster import start_cluster
from frenzy.v1 import types_pb2

pytestmark = pytest.mark.e2e
DATA = Path(__file__).parent / "data"
TERMINAL = {types_pb2.SUCCEEDED, types_pb2.FAILED, types_pb2.CANCELLED}


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap, tmp_path_factory):
    os.environ["KAFKA_BOOTSTRAP"] = kafka_bootstrap
    local = start_cluster(DATA / "cluster_failover.yaml", free_port(),
                          tmp_path_factory.mktemp("frenzy"), "has",
                          extra_env={"FRENZY_NODE_TIMEOUT_S": "3", "FRENZY_TIME_SCALE": "0.01"},
                          namespace="failures")
    yield local
    local.stop()


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
