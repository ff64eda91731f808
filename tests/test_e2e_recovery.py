"""Restarts mid-workload. A killed orchestrator rebuilds its state from Kafka and every job
still reaches a terminal state exactly once; a killed scheduler rebuilds its view and places the
jobs that were waiting; killed agents adopt their still-running jobs and report the ones that
ended while they were down."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict

import pytest

from frenzy import events, topics
from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.v1 import events_pb2, types_pb2

pytestmark = pytest.mark.e2e
JOBS = 20  # on 12 GPUs: some run and some wait when the orchestrator dies


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(f"recovery{int(time.time())}", time_scale=None,
                         extra_env={"FRENZY_NODE_TIMEOUT_S": "15"})


def spec(i: int) -> types_pb2.JobSpec:
    # Each job holds one GPU for 2-5 s.
    script = f"import time; time.sleep({2 + i % 4})"
    return types_pb2.JobSpec(name=f"recover-{i}", model="gpt2", entrypoint=[sys.executable, "-c", script],
                             constraints=types_pb2.Constraints(max_gpus=1),
                             training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8,
                                                               tokens=1_000_000))


def read_status_events(bootstrap: str, topic: str, job_ids: set[str], timeout_s: float = 30):
    """Every orchestrator JobStatusChanged of these jobs, read until all have a terminal one."""
    from aiokafka import AIOKafkaConsumer

    async def go() -> list[events_pb2.JobStatusChanged]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                    auto_offset_reset="earliest")
        await consumer.start()
        seen: list[events_pb2.JobStatusChanged] = []
        try:
            deadline = time.monotonic() + timeout_s
            quiet_until = None
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=300)
                for record in (r for rs in batch.values() for r in rs):
                    status = events.decode(record.value, record.headers).job_status_changed
                    if status.source == events_pb2.ORCHESTRATOR and status.job_id in job_ids:
                        seen.append(status)
                done = {s.job_id for s in seen if s.state in TERMINAL}
                if done >= job_ids:
                    # keep reading a little: a duplicate terminal event would come after
                    quiet_until = quiet_until or time.monotonic() + 2
                    if time.monotonic() > quiet_until:
                        break
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(go())


def test_orchestrator_killed_and_restarted_loses_no_job(cluster):
    with FrenzyClient(cluster.grpc_address, timeout_s=30) as client:
        job_ids = {client.submit(spec(i), job_id=f"rec-{cluster.namespace}-{i}") for i in range(JOBS)}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until some run and some wait
            states = [client.get(j).state for j in job_ids]
            if types_pb2.RUNNING in states:
                break
            time.sleep(0.2)
        before = {j: client.get(j) for j in job_ids}
        assert any(j.state == types_pb2.RUNNING for j in before.values())
        assert any(j.state == types_pb2.QUEUED for j in before.values())

        cluster.stop_process("orchestrator", signal.SIGKILL)
        time.sleep(3)  # jobs finish and agents report while the orchestrator is down
        cluster.restart("orchestrator")

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jobs = {j: client.get(j) for j in job_ids}  # waits for the new server to answer
            if all(job.state in TERMINAL for job in jobs.values()):
                break
            time.sleep(0.5)
        unfinished = {j: types_pb2.JobState.Name(job.state) for j, job in jobs.items()
                      if job.state not in TERMINAL}
        assert not unfinished, f"jobs never finished after the restart: {unfinished}"
        assert all(job.state == types_pb2.SUCCEEDED for job in jobs.values()), \
            {j: job.reason for j, job in jobs.items()}

    statuses = read_status_events(cluster.bootstrap, cluster.topic_name(topics.JOBS_STATUS), job_ids)
    terminal_versions: dict[str, set[int]] = defaultdict(set)
    for status in statuses:
        if status.state in TERMINAL:
            terminal_versions[status.job_id].add(status.job.version)
    # Exactly one terminal transition per job (a redelivered copy carries the same version).
    assert {j: len(v) for j, v in terminal_versions.items()} == {j: 1 for j in job_ids}

    # The restarted orchestrator serves metrics, including the restored job counts.
    text = urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_port}/metrics", timeout=10).read()
    assert f'frenzy_jobs{{state="SUCCEEDED"}} {float(JOBS)}'.encode() in text


def test_killed_agents_adopt_running_jobs_and_report_finished_ones(cluster):
    marker = f"agent-restart-{cluster.namespace}"
    with FrenzyClient(cluster.grpc_address, timeout_s=30) as client:
        def job(name: str, sleep_s: float) -> str:
            script = f"import time; time.sleep({sleep_s})  # {marker}"
            return client.submit(types_pb2.JobSpec(
                name=name, model="gpt2", entrypoint=[sys.executable, "-c", script],
                constraints=types_pb2.Constraints(max_gpus=1),
                training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8, tokens=1_000_000)))

        long_id, short_id = job("outlives-agent", 10), job("ends-while-agent-down", 3)
        deadline = time.monotonic() + 60
        while {client.get(long_id).state, client.get(short_id).state} != {types_pb2.RUNNING}:
            assert time.monotonic() < deadline, "jobs never both ran"
            time.sleep(0.2)
        agents = [name for name in cluster.processes if name.startswith("agent-")]
        for name in agents:
            cluster.stop_process(name, signal.SIGKILL)  # job processes live on, in their own group
        time.sleep(4)  # the short job ends while no agent watches it
        for name in agents:
            cluster.restart(name)
        deadline = time.monotonic() + 60
        while not all(client.get(j).state in TERMINAL for j in (long_id, short_id)):
            assert time.monotonic() < deadline, "jobs not finished after the agents came back"
            time.sleep(0.3)
        for job_id in (long_id, short_id):
            done = client.get(job_id)
            # Same attempt: adopted or reported, not re-queued as lost.
            assert done.state == types_pb2.SUCCEEDED and done.attempt == 0, (job_id, done.reason)
    leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.strip()
    assert leftover == "", "orphan job processes left behind"


def test_killed_scheduler_rebuilds_its_view_and_places_waiting_jobs(cluster):
    with FrenzyClient(cluster.grpc_address, timeout_s=30) as client:
        job_ids = {client.submit(spec(i), job_id=f"sched-{cluster.namespace}-{i}") for i in range(JOBS)}
        deadline = time.monotonic() + 60
        while not any(client.get(j).state == types_pb2.QUEUED for j in job_ids):
            assert time.monotonic() < deadline, "no job ever waited"
            time.sleep(0.2)
        cluster.stop_process("scheduler", signal.SIGKILL)  # its view is gone, its offsets are not
        time.sleep(1)
        cluster.restart("scheduler")
        deadline = time.monotonic() + 120
        while not all((job := client.get(j)).state in TERMINAL for j in job_ids):
            assert time.monotonic() < deadline, \
                f"waiting jobs never placed after the scheduler restart, e.g. {job.id}: {job.reason}"
            time.sleep(0.5)
        assert all(client.get(j).state == types_pb2.SUCCEEDED for j in job_ids)


def test_a_poison_record_on_the_state_topic_is_skipped_on_restart(cluster):
    """A record with a non-UTF-8 key on the orchestrator's state topic used to crash the
    orchestrator and the scheduler on every restart (both read the topic back)."""
    from aiokafka import AIOKafkaProducer

    async def poison() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, enable_idempotence=False)
        await producer.start()
        try:
            for partition in range(topics.ORCHESTRATOR_STATE.partitions):
                await producer.send_and_wait(cluster.topic_name(topics.ORCHESTRATOR_STATE), b"\xff",
                                             key=b"\xff\xfejob/poison", partition=partition)
        finally:
            await producer.stop()

    asyncio.run(poison())
    for name in ("orchestrator", "scheduler"):
        cluster.stop_process(name, signal.SIGKILL)
        cluster.restart(name)
    with FrenzyClient(cluster.grpc_address, timeout_s=60) as client:
        job_id = client.submit(spec(1), job_id=f"after-poison-{cluster.namespace}")
        deadline = time.monotonic() + 90
        while (job := client.get(job_id)).state not in TERMINAL:
            assert time.monotonic() < deadline, job
            time.sleep(0.3)
        assert job.state == types_pb2.SUCCEEDED, job.reason
    assert not cluster.dead()
