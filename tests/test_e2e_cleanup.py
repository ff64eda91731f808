"""Checkpoint cleanup through the real system when the node's agent is down at the job's end for
longer than a signed command lives: its DeleteCheckpoints expires on the broker, the
orchestrator keeps the delete pending and sends it again, freshly signed, when the node is back."""
from __future__ import annotations

import json
import signal
import time

import pytest

from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.v1 import types_pb2
from frenzy_agent.executor import job_key

pytestmark = pytest.mark.e2e
COMMAND_TTL_S = 3  # long enough for every other command on a loaded machine
NODE_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster("cleanup", "cluster_small.yaml", time_scale=None,
                         extra_env={"FRENZY_COMMAND_TTL_S": str(COMMAND_TTL_S),
                                    "FRENZY_NODE_TIMEOUT_S": str(NODE_TIMEOUT_S),
                                    # a launch that expired anyway is retried within the wait
                                    "FRENZY_LAUNCH_TIMEOUT_S": "20"})


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _acks(cluster) -> set[tuple[str, str, int]]:
    """(job, node, paths removed) of each CheckpointsDeleted the orchestrator took."""
    acks = set()
    for line in (cluster.workdir / "logs" / "orchestrator.log").read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == "checkpoint delete acknowledged":
            acks.add((entry["job_id"], entry["node_id"], entry["removed"]))
    return acks


def test_a_job_that_ends_while_its_agent_is_down_past_the_command_ttl_loses_its_checkpoints(cluster):
    script = ('d="$FRENZY_CHECKPOINT_URI/step-000000002"; mkdir -p "$d" && echo {} > "$d/COMMITTED"; '
              'sleep 600')
    spec = types_pb2.JobSpec(
        name="cleanup-outage", model="gpt2", entrypoint=["sh", "-c", script],
        constraints=types_pb2.Constraints(max_gpus=1),
        training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8, steps=10))
    root = cluster.workdir / "agents" / "checkpoints"
    with FrenzyClient(cluster.grpc_address, timeout_s=30) as client:
        job_id = client.submit(spec)
        directory = root / job_key(job_id)
        _wait_for(lambda: (directory / "step-000000002" / "COMMITTED").exists(), 60,
                  "the job never wrote its checkpoint")
        node = client.get(job_id).assignments[0].node_id
        agent = f"agent-{node}"
        cluster.stop_process(agent, signal.SIGKILL)  # the job's process lives on, unwatched
        client.cancel(job_id)
        assert client.get(job_id).state in TERMINAL
        # The DeleteCheckpoints sent with the cancel expires, and the node is declared lost.
        time.sleep(max(COMMAND_TTL_S, NODE_TIMEOUT_S) + 2)
        assert directory.exists()
        restarted_s = time.monotonic()
        cluster.restart(agent)
        _wait_for(lambda: not directory.exists(), 30,
                  f"the checkpoints are still there: {sorted(p.name for p in directory.iterdir())}")
        print(f"checkpoints removed {time.monotonic() - restarted_s:.1f} s after the agent restarted")
    log = (cluster.workdir / "logs" / f"{agent}.log").read_text(errors="replace")
    assert "delete_checkpoints: expired" in log, "the first command did not expire: the test proved nothing"
    _wait_for(lambda: (job_id, node, 1) in _acks(cluster), 10,
              "the orchestrator never got the agent's acknowledgement")
    assert not cluster.dead()
