"""The Python SDK (`frenzy.Client`, `frenzy.pipeline.produce_job`): the spec forms it takes and the
records it writes, without a cluster; then every call against a real one."""
from __future__ import annotations

import time
from concurrent import futures

import grpc
import pytest

import frenzy
from frenzy import events
from frenzy.client import to_spec
from frenzy.jobspec import SpecError
from frenzy.pipeline import job_submitted_record, produce_job
from frenzy.v1 import services_pb2_grpc, types_pb2

SPEC = {"name": "sdk", "model": "gpt2",
        "training": {"seq_len": 1024, "global_batch_size": 8, "tokens": 20_000_000}}
SPEC_YAML = "name: sdk\nmodel: gpt2\ntraining: {seq_len: 1024, global_batch_size: 8, tokens: 20000000}\n"


def test_a_spec_is_the_same_from_a_dict_a_yaml_string_and_a_yaml_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC_YAML)
    forms = [to_spec(SPEC), to_spec(SPEC_YAML), to_spec(path), to_spec(str(path))]
    assert all(f == forms[0] for f in forms) and forms[0].training.tokens == 20_000_000
    assert to_spec(forms[0]) is forms[0]


@pytest.mark.parametrize("spec, field", [
    ({"name": "x", "model": "gpt2", "training": {"seq_len": 1024}}, "training.global_batch_size"),
    ({**SPEC, "gpus": 8}, "gpus"),
    ("- a list\n- not a spec\n", "spec"),
])
def test_a_bad_spec_names_its_field(spec, field):
    with pytest.raises(SpecError) as err:
        to_spec(spec)
    assert err.value.field == field


def test_a_pipeline_record_is_a_validated_job_submitted_envelope_with_the_signers_headers():
    signed = []

    def sign(key: bytes, value: bytes) -> events.Headers:
        signed.append((key, value))
        return [("x-frenzy-signature", b"sig")]

    key, value, headers = job_submitted_record(SPEC, "nightly-1", sign)
    env = events.decode(value, headers)
    assert key == b"nightly-1" and env.job_submitted.job_id == "nightly-1"
    assert env.job_submitted.spec.name == "sdk" and env.job_submitted.HasField("submitted_at")
    assert signed == [(key, value)] and ("x-frenzy-signature", b"sig") in headers
    with pytest.raises(SpecError) as err:
        job_submitted_record({**SPEC, "model": "no-such-model"}, "x")
    assert err.value.field == "spec.model"


class _RecordingJobs(services_pb2_grpc.JobServiceServicer):
    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    def GetJob(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        return types_pb2.Job(id=request.job_id)


@pytest.mark.parametrize("token, env_token, expected", [
    ("abc", "", "Bearer abc"), (None, "from-env", "Bearer from-env"), (None, "", None)])
def test_the_token_travels_as_bearer_metadata(monkeypatch, token, env_token, expected):
    monkeypatch.setenv("FRENZY_TOKEN", env_token)
    jobs = _RecordingJobs()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    services_pb2_grpc.add_JobServiceServicer_to_server(jobs, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with frenzy.Client(f"127.0.0.1:{port}", token=token) as client:
            assert client.get("j1").id == "j1"
    finally:
        server.stop(None)
    assert jobs.metadata[0].get("authorization") == expected


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster("sdk")


@pytest.mark.e2e
def test_the_sdk_submits_waits_lists_explains_and_cancels_on_a_real_cluster(cluster):
    with frenzy.Client(cluster.grpc_address) as client:
        job_id = client.submit(SPEC, job_id="sdk-1")
        job = client.wait(job_id, timeout_s=90)
        assert job.state == types_pb2.SUCCEEDED, job.reason
        assert job_id in {j.id for j in client.list()}
        assert job_id in {j.id for j in client.list([types_pb2.SUCCEEDED])}
        explained = client.explain(job_id)
        # The decision record comes with the scheduling issue's scheduler; until then it is absent.
        assert explained.decision is None or explained.decision.HasField("chosen")
        assert explained.job.option.gpu_type and explained.options
        assert any(o.gpu_type == explained.job.option.gpu_type for o in explained.options)
        long_id = client.submit({**SPEC, "name": "long", "training": {**SPEC["training"],
                                                                       "tokens": 10**13}})
        assert client.cancel(long_id).id == long_id
        assert client.wait(long_id, timeout_s=60).state == types_pb2.CANCELLED
        with pytest.raises(grpc.RpcError) as err:
            client.submit({**SPEC, "training": {**SPEC["training"], "seq_len": 4096}})
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.e2e
def test_a_job_produced_onto_kafka_by_the_sdk_succeeds(cluster):
    key_id, secret = cluster.security.create_pipeline_key()  # the tenant's pipeline key
    job_id = produce_job(SPEC_YAML, "sdk-kafka-1", bootstrap_servers=cluster.bootstrap, namespace="sdk",
                         pipeline_key=f"{key_id}.{secret.decode()}")
    with frenzy.Client(cluster.grpc_address) as client:
        job = None
        for _ in range(300):  # the orchestrator knows the job once it has read the record
            try:
                job = client.wait(job_id, timeout_s=90)
                break
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.NOT_FOUND
                time.sleep(0.2)
    assert job is not None and job.state == types_pb2.SUCCEEDED, job
