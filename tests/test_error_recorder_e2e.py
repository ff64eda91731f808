"""The memory-error recorder (a faust worker) on the real broker: it counts orchestrator terminal
events per model|gpu_type, ignores redeliveries, dead-letters garbage, and after a SIGKILL comes
back from its changelog with the same table. The table is read through its web view."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from frenzy import topics
from frenzy.bus import Bus, partition_for_key
from frenzy.config import BusSettings
from frenzy.ports import free_port
from frenzy.v1 import events_pb2, types_pb2
from test_error_recorder import status as status_event

pytestmark = pytest.mark.e2e
GIB = 1 << 30


class Recorder:
    def __init__(self, bootstrap: str, workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.namespace = f"errrec{uuid.uuid4().hex[:8]}"  # the changelog must start empty
        self.port = free_port()
        self.log_path = workdir / "error-recorder.log"
        self.env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "FRENZY_NAMESPACE": self.namespace,
                    "FRENZY_ERRORS_WEB_PORT": str(self.port),
                    "FRENZY_ERRORS_DATA_DIR": str(workdir / "data"), "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "frenzy_predictor.error_recorder"],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def wait_ready(self, timeout_s: float = 60) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"recorder exited; see {self.log_path}"
            try:
                code, body = self.get("/memory-errors/")
                if code == 200:
                    return json.loads(body)
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"recorder not ready after {timeout_s}s; see {self.log_path}")

    def wait_for(self, predicate, timeout_s: float = 30) -> dict:
        deadline = time.monotonic() + timeout_s
        table: dict = {}
        while time.monotonic() < deadline:
            code, body = self.get("/memory-errors/")
            if code == 200:
                table = json.loads(body)
                if predicate(table):
                    return table
            time.sleep(0.1)
        raise AssertionError(f"table never got there; last {table}; see {self.log_path}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(15)


@pytest.fixture(scope="module")
def recorder(kafka_bootstrap, tmp_path_factory):
    rec = Recorder(kafka_bootstrap, tmp_path_factory.mktemp("error-recorder"))
    rec.start()
    try:
        assert rec.wait_ready() == {}
        yield rec
    finally:
        if rec.proc.poll() is None:
            rec.proc.kill()
            rec.proc.wait()


def status(job_id: str, state: int, reason: str, model: str, gpu_type: str, predicted: int,
           measured: int, attempt: int = 0, source: int = events_pb2.ORCHESTRATOR):
    """The unit tests' event factory, with positional arguments in table order."""
    return status_event(job_id=job_id, state=state, reason=reason, attempt=attempt, model=model,
                        gpu_type=gpu_type, predicted=predicted, measured=measured, source=source)


def same_partition_ids(prefix: str, n: int) -> list[str]:
    """Job ids whose records land on one partition of frenzy.jobs.status, so they are handled
    in the order they are produced: the last one seen means all before it were seen."""
    ids, i = [], 0
    while len(ids) < n:
        if partition_for_key(f"{prefix}-{i}", topics.JOBS_STATUS.partitions) == 0:
            ids.append(f"{prefix}-{i}")
        i += 1
    return ids


def publish(rec: Recorder, items: list[tuple[str, object]]) -> None:
    """Publish in order; an item whose payload is bytes goes as a raw (undecodable) record."""
    async def go() -> None:
        bus = Bus("test", BusSettings(kafka_bootstrap=rec.bootstrap, namespace=rec.namespace))
        await bus.start()
        try:
            for key, payload in items:
                if isinstance(payload, bytes):
                    await bus.producer.send_and_wait(bus.topic_name(topics.JOBS_STATUS), payload,
                                                     key=key.encode())
                else:
                    await bus.publish(topics.JOBS_STATUS, key, payload)
        finally:
            await bus.stop()

    asyncio.run(go())


def dead_letters(rec: Recorder, timeout_s: float = 10) -> list[dict[str, bytes]]:
    """Header dicts of the records on the namespaced dead-letter topic (read from the start)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> list[dict[str, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=rec.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=50)
        await consumer.start()
        try:
            tp = TopicPartition(f"{rec.namespace}.{topics.DEADLETTER.name}", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            found, deadline = [], time.monotonic() + timeout_s
            while not found and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    found += [dict(r.headers) for r in records]
            return found
        finally:
            await consumer.stop()

    return asyncio.run(go())


A, B, C = same_partition_ids("job", 3)


def test_terminal_events_are_counted_per_key_once(recorder):
    noise = same_partition_ids("noise", 6)
    publish(recorder, [
        # OOM that the orchestrator re-plans (SUBMITTED, attempt bumped), redelivered
        (A, status(A, types_pb2.SUBMITTED, "OOM on A100 (...); re-planning", "gpt2", "A100",
                   8 * GIB, 10 * GIB, attempt=1)),
        (A, status(A, types_pb2.SUBMITTED, "OOM on A100 (...); re-planning", "gpt2", "A100",
                   8 * GIB, 10 * GIB, attempt=1)),
        # ignored: not the orchestrator, not terminal, not an OOM, nothing measured, garbage
        (noise[0], status(noise[0], types_pb2.SUCCEEDED, "", "gpt2", "A100", GIB, GIB,
                          source=events_pb2.AGENT)),
        (noise[1], status(noise[1], types_pb2.RUNNING, "processes started", "gpt2", "A100", GIB, GIB)),
        (noise[2], status(noise[2], types_pb2.FAILED, "exit code 1", "gpt2", "A100", GIB, GIB)),
        (noise[3], status(noise[3], types_pb2.SUCCEEDED, "all processes exited 0", "gpt2", "A100",
                          GIB, 0)),
        (noise[4], status(noise[4], types_pb2.CANCELLED, "cancelled by user", "gpt2", "A100", GIB, GIB)),
        (noise[5], b"\x00not an envelope"),
        # its next attempt succeeds on H100; a final OOM on another model
        (A, status(A, types_pb2.SUCCEEDED, "all processes exited 0", "gpt2", "H100",
                   15 * GIB, 12 * GIB, attempt=1)),
        (B, status(B, types_pb2.FAILED, "OOM: out of memory", "llama2-7b", "H100",
                   45 * GIB, 50 * GIB, attempt=2)),
        (B, status(B, types_pb2.FAILED, "OOM: out of memory", "llama2-7b", "H100",
                   45 * GIB, 50 * GIB, attempt=2)),
        (C, status(C, types_pb2.SUCCEEDED, "all processes exited 0", "gpt2", "A100",
                   11 * GIB, 10 * GIB)),
    ])
    table = recorder.wait_for(lambda t: t.get("gpt2|A100", {}).get("last_job_id") == C)
    assert table == {
        "gpt2|A100": {"jobs": 2, "sum_abs_error": pytest.approx(0.3),
                      "mean_abs_error": pytest.approx(0.15),
                      "worst_under_prediction": pytest.approx(-0.2), "last_job_id": C},
        "gpt2|H100": {"jobs": 1, "sum_abs_error": pytest.approx(0.25),
                      "mean_abs_error": pytest.approx(0.25), "worst_under_prediction": 0.0,
                      "last_job_id": A},
        "llama2-7b|H100": {"jobs": 1, "sum_abs_error": pytest.approx(0.1),
                           "mean_abs_error": pytest.approx(0.1),
                           "worst_under_prediction": pytest.approx(-0.1), "last_job_id": B},
    }
    code, text = recorder.get("/metrics")
    assert code == 200
    assert 'frenzy_predictor_memory_error_jobs{model="gpt2",gpu_type="A100"} 2.0' in text.decode()
    reasons = [h.get("x-frenzy-reason", b"").decode() for h in dead_letters(recorder)]
    assert any(r.startswith("malformed:") for r in reasons), reasons


def test_table_comes_back_from_its_changelog_after_sigkill(recorder):
    before = recorder.wait_for(lambda t: t.get("gpt2|A100", {}).get("last_job_id") == C)
    recorder.stop(signal.SIGKILL)
    recorder.start()
    assert recorder.wait_ready() == before
    # The dedupe ids came back too: a redelivery of a counted event still counts once.
    (D,) = same_partition_ids("after", 1)
    publish(recorder, [
        (C, status(C, types_pb2.SUCCEEDED, "all processes exited 0", "gpt2", "A100",
                   11 * GIB, 10 * GIB)),
        (D, status(D, types_pb2.SUCCEEDED, "all processes exited 0", "gpt2", "A100",
                   10 * GIB, 10 * GIB)),
    ])
    after = recorder.wait_for(lambda t: t["gpt2|A100"]["last_job_id"] == D)
    assert after["gpt2|A100"]["jobs"] == 3
    assert after["gpt2|A100"]["sum_abs_error"] == pytest.approx(0.3)
    assert {k: v for k, v in after.items() if k != "gpt2|A100"} == \
        {k: v for k, v in before.items() if k != "gpt2|A100"}
    assert recorder.stop(signal.SIGTERM) == 0


def test_local_cluster_records_a_real_jobs_error(kafka_bootstrap, local_cluster, tmp_path):
    """start_cluster runs the recorder beside the services; a real job's measured peak lands in
    the table, and the recorder exits cleanly with the cluster."""
    from frenzy.client import FrenzyClient

    cluster = local_cluster(f"errclu{uuid.uuid4().hex[:8]}", workdir=tmp_path)
    try:
        view = Recorder(kafka_bootstrap, tmp_path)
        view.port, view.proc, view.log_path = (cluster.errors_port, cluster.processes["errors"],
                                               tmp_path / "logs" / "errors.log")
        spec = types_pb2.JobSpec(name="measured", model="gpt2", training=types_pb2.TrainingConfig(
            seq_len=1024, global_batch_size=8, tokens=20_000_000))
        with FrenzyClient(cluster.grpc_address) as client:
            job_id = client.submit(spec)
            job = client.get(job_id)
            deadline = time.monotonic() + 60
            while job.state != types_pb2.SUCCEEDED and time.monotonic() < deadline:
                time.sleep(0.2)
                job = client.get(job_id)
        assert job.state == types_pb2.SUCCEEDED and job.progress.peak_memory_bytes > 0
        key = f"gpt2|{job.option.gpu_type}"
        table = view.wait_for(lambda t: t.get(key, {}).get("last_job_id") == job_id)
        # The record compares the measured peak (max_memory_allocated) with the allocated peak.
        predicted = job.option.peak_allocated_bytes
        assert 0 < predicted < job.option.peak_bytes_per_gpu
        error = (predicted - job.progress.peak_memory_bytes) / job.progress.peak_memory_bytes
        assert table[key]["jobs"] == 1
        assert table[key]["sum_abs_error"] == pytest.approx(abs(error))
    finally:
        cluster.stop()
    assert cluster.processes["errors"].returncode == 0
