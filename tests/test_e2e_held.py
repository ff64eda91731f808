"""Holds ahead through the real services and broker: the scheduler places a waiting job on the
GPU of the running job expected to end first (HeldPlacements), and the orchestrator launches it
in the step that releases that GPU; a hold that no longer fits is not launched, and the usual
path (availability -> scheduler -> JobPlaced) places the job. One GPU, so every job waits for
the one before it; each job's program runs until the test lets it end (a file appears)."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from frenzy import topics
from frenzy.bus import Bus
from frenzy.client import FrenzyClient
from frenzy.config import BusSettings
from frenzy.jobstates import TERMINAL
from frenzy.v1 import events_pb2, types_pb2

pytestmark = pytest.mark.e2e

# Waits for its file, then exits 0 (bounded: a test that fails leaves nothing running long).
WAIT_FOR_FILE = ("import os, sys, time\n"
                 "deadline = time.time() + 120\n"
                 "while not os.path.exists(sys.argv[1]) and time.time() < deadline:\n"
                 "    time.sleep(0.05)\n")


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster("held", cluster_file="cluster_held.yaml")


@pytest.fixture()
def client(cluster):
    with FrenzyClient(cluster.grpc_address) as c:
        yield c


def spec(name: str, go: Path) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name=name, model="gpt2",
                             entrypoint=[sys.executable, "-c", WAIT_FOR_FILE, str(go)],
                             training=types_pb2.TrainingConfig(seq_len=1024, global_batch_size=8,
                                                               tokens=20_000_000))


def wait_for(what: str, check, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def log_entries(cluster, service: str, msg: str) -> list[dict]:
    entries = []
    for line in (cluster.workdir / "logs" / f"{service}.log").read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == msg:
            entries.append(entry)
    return entries


def held_for(cluster, ending: str, waiting: str) -> bool:
    """The scheduler logged a hold for `ending`'s GPUs naming `waiting` (after publishing it)."""
    return any(e["job_id"] == ending and waiting in e["jobs"]
               for e in log_entries(cluster, "scheduler", "held ahead"))


def placed_reason(cluster, job_id: str) -> str:
    return next((e["reason"] for e in log_entries(cluster, "orchestrator", "job state")
                 if e["job_id"] == job_id and e["state"] == "PLACED"), "")


def running_then_queued(client, cluster, tmp_path: Path, first: str, second: str):
    first_id = client.submit(spec(first, tmp_path / first))
    wait_for(f"{first} running", lambda: client.get(first_id).state == types_pb2.RUNNING)
    second_id = client.submit(spec(second, tmp_path / second))
    wait_for(f"{second} queued", lambda: client.get(second_id).state == types_pb2.QUEUED)
    wait_for(f"a hold for {first} naming {second}", lambda: held_for(cluster, first_id, second_id))
    return first_id, second_id


def finish(client, tmp_path: Path, name: str, job_id: str) -> types_pb2.Job:
    (tmp_path / name).touch()
    return wait_for(f"{name} ended", lambda: (j := client.get(job_id)).state in TERMINAL and j)


def test_a_held_job_launches_in_the_step_that_releases_the_gpu(client, cluster, tmp_path):
    first, second = running_then_queued(client, cluster, tmp_path, "first", "second")
    ended = finish(client, tmp_path, "first", first)
    assert ended.state == types_pb2.SUCCEEDED
    wait_for("second placed", lambda: placed_reason(cluster, second))
    assert placed_reason(cluster, second) == f"1 node(s), held for {first}"
    job = client.get(second)
    assert job.placed_at.ToNanoseconds() == ended.finished_at.ToNanoseconds()  # the same step
    assert finish(client, tmp_path, "second", second).state == types_pb2.SUCCEEDED


def test_a_stale_hold_is_not_launched_and_the_usual_path_places_the_job(client, cluster, tmp_path):
    """A hold naming a GPU the node does not have (what the scheduler's stale view could
    name) replaces the scheduler's: at the release it fails the placement check, nothing is
    launched from it, and the scheduler places the job on the freed GPU."""
    first, second = running_then_queued(client, cluster, tmp_path, "third", "fourth")
    running = client.get(first)
    stale = events_pb2.HeldPlacements(releasing_job_id=first, releasing_attempt=running.attempt,
                                      placements=[events_pb2.JobPlaced(
                                          job_id=second, attempt=0, placement_id="stale",
                                          option=running.option, assignments=[types_pb2.GpuAssignment(
                                              node_id=running.assignments[0].node_id, gpu_indices=[3])])])

    async def publish() -> None:
        bus = Bus("test-held", BusSettings(kafka_bootstrap=cluster.bootstrap, namespace=cluster.namespace))
        await bus.start()
        try:
            await bus.publish(topics.JOBS_PLACED, first, stale)
        finally:
            await bus.stop()
    # Acknowledged before the job can end: the orchestrator takes it before that job's end
    # report, which its consumer handles after the placements topic's records.
    asyncio.run(publish())
    assert finish(client, tmp_path, "third", first).state == types_pb2.SUCCEEDED
    wait_for("fourth placed", lambda: placed_reason(cluster, second))
    assert placed_reason(cluster, second) == "1 node(s)"  # the usual path, not the hold
    job = client.get(second)
    assert [list(a.gpu_indices) for a in job.assignments] == [[0]]
    assert finish(client, tmp_path, "fourth", second).state == types_pb2.SUCCEEDED

