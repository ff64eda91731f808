"""The Python SDK for Frenzy's gRPC API: `frenzy.Client` (docs/user-guide.md, "Python SDK").

    import frenzy
    with frenzy.Client() as client:                      # FRENZY_ADDR, else 127.0.0.1:50051
        job_id = client.submit({"name": "nightly", "model": "gpt2",
                                "training": {"seq_len": 1024, "global_batch_size": 8,
                                             "tokens": 20_000_000}})
        job = client.wait(job_id)                         # the job once it has ended

A spec may be a dict (the job-spec YAML's shape), a path to a YAML file, a YAML string or a
JobSpec message; a dict or YAML gets the same validation as `frenzy submit`, so a bad field raises
SpecError naming it before anything is sent.

It finds the cluster's address, token and CA by itself (`frenzy.security.clientconfig`: FRENZY_ADDR,
FRENZY_TOKEN, else the client config `frenzy up` writes), sends the token as a bearer token in the
metadata of every call, and speaks TLS when the config carries a CA. A spec whose model names a
local config.json is sent with the file inline: servers never open a path a client named.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import grpc
import yaml

from frenzy import tracing
from frenzy.jobspec import SpecError, inline_model_config, load_spec_file, spec_from_dict
from frenzy.jobstates import TERMINAL
from frenzy.security.clientconfig import DEFAULT_ADDRESS, resolve
from frenzy.v1 import services_pb2, services_pb2_grpc, types_pb2

__all__ = ["DEFAULT_ADDRESS", "Client", "Explanation", "FrenzyClient", "default_address", "to_spec"]

SpecLike = types_pb2.JobSpec | dict | str | Path


def default_address() -> str:
    return resolve().address


def to_spec(spec: SpecLike) -> types_pb2.JobSpec:
    """Whatever a caller holds -> JobSpec. A str is a file path when such a file exists, else YAML."""
    if isinstance(spec, types_pb2.JobSpec):
        return spec
    if isinstance(spec, dict):
        return spec_from_dict(spec)
    if isinstance(spec, Path) or (isinstance(spec, str) and "\n" not in spec and Path(spec).is_file()):
        return load_spec_file(spec)
    if isinstance(spec, str):
        try:
            data = yaml.safe_load(spec)
        except yaml.YAMLError as err:
            raise SpecError("spec", f"not valid YAML and not a file: {err}") from None
        if not isinstance(data, dict):
            raise SpecError("spec", "must be a mapping, a YAML file path or a JobSpec")
        return spec_from_dict(data)
    raise SpecError("spec", f"cannot read a spec from {type(spec).__name__}")


@dataclass(frozen=True)
class Explanation:
    """Why Frenzy chose a GPU type and plan for a job, or why it waits: `Client.explain`.

    job: the job as the orchestrator holds it (job.option is the held option);
    decision: the scheduler's decision record, None before the job is placed;
    options: MARP's ranked options for the job's spec, from the Predict dry run.
    """

    job: types_pb2.Job
    decision: types_pb2.DecisionRecord | None
    options: list[types_pb2.PlanOption] = field(default_factory=list)


class Client:
    """One channel to the orchestrator's API (JobService, ClusterService, PredictorService).

    Unary calls wait for the server to come up (wait_for_ready) for up to timeout_s each.
    """

    def __init__(self, address: str | None = None, timeout_s: float = 10.0, token: str | None = None,
                 credentials: grpc.ChannelCredentials | None = None,
                 ca_pem: str | None = None) -> None:
        config = resolve(address, token)
        self.address = config.address
        self.timeout_s = timeout_s
        self._metadata: tuple[tuple[str, str], ...] = \
            (("authorization", f"Bearer {config.token}"),) if config.token else ()
        ca = ca_pem if ca_pem is not None else config.ca_pem
        if credentials is None and ca:
            credentials = grpc.ssl_channel_credentials(root_certificates=ca.encode())
        self.channel = (grpc.secure_channel(self.address, credentials) if credentials
                        else grpc.insecure_channel(self.address))
        self._jobs = services_pb2_grpc.JobServiceStub(self.channel)
        self._cluster = services_pb2_grpc.ClusterServiceStub(self.channel)
        self._predictor = services_pb2_grpc.PredictorServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(self, method: Any, request: Any) -> Any:
        # The caller's trace context, when it traces (frenzy/tracing.py): the job's trace joins it.
        return method(request, timeout=self.timeout_s, wait_for_ready=True,
                      metadata=self._metadata + tracing.current_metadata())

    # Jobs
    def submit(self, spec: SpecLike, job_id: str = "") -> str:
        """Submit a job; returns its id. Submitting a known job_id again is idempotent."""
        return self._unary(self._jobs.SubmitJob,
                           services_pb2.SubmitJobRequest(spec=inline_model_config(to_spec(spec)), job_id=job_id)).job_id

    def get(self, job_id: str) -> types_pb2.Job:
        return self._unary(self._jobs.GetJob, services_pb2.GetJobRequest(job_id=job_id))

    def list(self, states: list[int] | None = None) -> list[types_pb2.Job]:
        """Every job the caller may see, or those in `states` (types_pb2.RUNNING, ...)."""
        return list(self._unary(self._jobs.ListJobs, services_pb2.ListJobsRequest(states=states or [])).jobs)

    def cancel(self, job_id: str) -> types_pb2.Job:
        return self._unary(self._jobs.CancelJob, services_pb2.CancelJobRequest(job_id=job_id))

    def watch(self, job_id: str, timeout_s: float | None = None) -> Iterator[types_pb2.Job]:
        """The job at every change until it ends (the stream closes then). timeout_s bounds the
        whole stream; past it, iteration raises grpc.RpcError with DEADLINE_EXCEEDED."""
        return self._jobs.WatchJob(services_pb2.WatchJobRequest(job_id=job_id), timeout=timeout_s,
                                   metadata=self._metadata)

    def wait(self, job_id: str, timeout_s: float | None = None) -> types_pb2.Job:
        """Block until the job ends; returns it. TimeoutError when timeout_s passes first."""
        try:
            for job in self.watch(job_id, timeout_s=timeout_s):
                if job.state in TERMINAL:
                    return job
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        job = self.get(job_id)
        if job.state not in TERMINAL:
            raise TimeoutError(f"{job_id} is still {types_pb2.JobState.Name(job.state)} after {timeout_s} s")
        return job

    def logs(self, job_id: str, rank: int | None = None, follow: bool = False, attempt: int = 0,
             timeout_s: float | None = None) -> Iterator[types_pb2.LogChunk]:
        """The job's rank logs as chunks (.rank, .attempt, .data bytes), in order per rank. With
        follow, new chunks arrive until the job has ended and its last lines are read."""
        request = services_pb2.StreamLogsRequest(job_id=job_id, follow=follow, attempt=attempt)
        if rank is not None:
            request.rank = rank
        return self._jobs.StreamLogs(request, timeout=timeout_s, metadata=self._metadata)

    def explain(self, job_id: str) -> Explanation:
        """The job, the scheduler's decision record and MARP's options for its spec."""
        job = self.get(job_id)
        return Explanation(job=job, decision=job.decision if job.HasField("decision") else None,
                           options=list(self.predict(job.spec).options))

    # Planning and the cluster
    def predict(self, spec: SpecLike, gpu_types: list[str] | None = None) -> services_pb2.PredictResponse:
        """MARP's ranked options for a spec, without submitting it (a dry run)."""
        return self._unary(self._predictor.Predict,
                           services_pb2.PredictRequest(spec=inline_model_config(to_spec(spec)),
                                                     gpu_types=gpu_types or []))

    def list_nodes(self) -> list[types_pb2.Node]:
        return list(self._unary(self._cluster.ListNodes, services_pb2.ListNodesRequest()).nodes)

    def cluster_summary(self) -> services_pb2.ClusterSummary:
        return self._unary(self._cluster.GetCluster, services_pb2.GetClusterRequest())


# The name the CLI, the examples and the tests used before the SDK was named `frenzy.Client`.
FrenzyClient = Client
