"""examples/pipelines against a real cluster: a job produced straight onto Kafka by a plain
aiokafka script, and a pipeline step that submits over gRPC, waits and hands on a summary."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.v1 import types_pb2

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
PIPELINES = ROOT / "examples" / "pipelines"
NAMESPACE = "pipelines"
SPEC = """\
name: {name}
model: gpt2
training: {{seq_len: 1024, global_batch_size: 8, tokens: 20000000}}
"""


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(NAMESPACE)


def run_example(script: str, *args: str, cluster, timeout_s: float = 90) -> subprocess.CompletedProcess:
    env = {**os.environ, "KAFKA_BOOTSTRAP": cluster.bootstrap, "FRENZY_NAMESPACE": NAMESPACE,
           "FRENZY_ADDR": cluster.grpc_address}
    return subprocess.run([sys.executable, str(PIPELINES / script), *args], capture_output=True,
                          text=True, env=env, timeout=timeout_s)


def test_a_job_produced_onto_kafka_by_a_plain_producer_succeeds(cluster, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(name="from-kafka"))
    key_id, secret = cluster.security.create_pipeline_key()  # the tenant's pipeline key
    produced = run_example("produce_job.py", str(spec), "--job-id", "pipeline-kafka-1",
                           "--pipeline-key", f"{key_id}.{secret.decode()}", cluster=cluster)
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout.strip() == "pipeline-kafka-1"
    with FrenzyClient(cluster.grpc_address) as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                job = client.get("pipeline-kafka-1")
                if job.state in TERMINAL:
                    break
            except Exception:  # not known until the orchestrator has read the record
                pass
            time.sleep(0.2)
    assert job.state == types_pb2.SUCCEEDED and job.spec.name == "from-kafka"


def test_a_pipeline_step_submits_waits_and_hands_on_a_summary(cluster, tmp_path):
    spec, output = tmp_path / "spec.yaml", tmp_path / "train.json"
    spec.write_text(SPEC.format(name="pipeline-step"))
    step = run_example("train_step.py", str(spec), "--job-id", "run-7-train", "--output", str(output),
                       cluster=cluster)
    assert step.returncode == 0, step.stdout + step.stderr
    assert "run-7-train SUCCEEDED" in step.stdout
    result = json.loads(output.read_text())
    assert result["state"] == "SUCCEEDED" and result["num_gpus"] >= 1 and result["run_s"] > 0
    # A retried step with the same id waits for the same job instead of training again.
    again = run_example("train_step.py", str(spec), "--job-id", "run-7-train", cluster=cluster)
    assert again.returncode == 0 and again.stdout.count("SUCCEEDED") == 1
    with FrenzyClient(cluster.grpc_address) as client:
        assert sum(j.spec.name == "pipeline-step" for j in client.list()) == 1


def test_a_pipeline_step_with_a_bad_spec_exits_2_naming_the_field(cluster, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\nmodel: gpt2\ntraining: {seq_len: 1024}\n")
    step = run_example("train_step.py", str(spec), cluster=cluster, timeout_s=30)
    assert step.returncode == 2 and "training.global_batch_size" in step.stderr
