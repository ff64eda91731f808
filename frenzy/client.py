"""The Python client for Frenzy's gRPC API.

It finds the cluster's address, token and CA by itself (`frenzy.security.clientconfig`), sends
the token on every call, and speaks TLS when the config carries a CA.
"""
from __future__ import annotations

from typing import Iterator

import grpc

from frenzy.jobspec import inline_model_config
from frenzy.security.clientconfig import DEFAULT_ADDRESS, resolve
from frenzy.v1 import services_pb2, services_pb2_grpc, types_pb2

__all__ = ["DEFAULT_ADDRESS", "FrenzyClient", "default_address"]


def default_address() -> str:
    return resolve().address


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call's metadata."""

    def __init__(self, token: str) -> None:
        self.metadata = (("authorization", f"Bearer {token}"),)

    def _with_token(self, details):
        metadata = tuple(details.metadata or ()) + self.metadata
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else \
            _CallDetails(details.method, details.timeout, metadata, details.credentials,
                         details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


class FrenzyClient:
    def __init__(self, address: str | None = None, timeout_s: float = 10.0,
                 token: str | None = None, ca_pem: str | None = None) -> None:
        config = resolve(address, token)
        self.address = config.address
        self.timeout_s = timeout_s
        ca = ca_pem if ca_pem is not None else config.ca_pem
        if ca:
            self.channel = grpc.secure_channel(
                self.address, grpc.ssl_channel_credentials(root_certificates=ca.encode()))
        else:
            self.channel = grpc.insecure_channel(self.address)
        if config.token:
            self.channel = grpc.intercept_channel(self.channel, _BearerToken(config.token))
        self.jobs = services_pb2_grpc.JobServiceStub(self.channel)
        self.cluster = services_pb2_grpc.ClusterServiceStub(self.channel)
        self.predictor = services_pb2_grpc.PredictorServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "FrenzyClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, spec: types_pb2.JobSpec, job_id: str = "") -> str:
        """Submit; a spec whose model is a local config.json path sends the file inline."""
        spec = inline_model_config(spec)
        return self.jobs.SubmitJob(services_pb2.SubmitJobRequest(spec=spec, job_id=job_id),
                                   timeout=self.timeout_s, wait_for_ready=True).job_id

    def get(self, job_id: str) -> types_pb2.Job:
        return self.jobs.GetJob(services_pb2.GetJobRequest(job_id=job_id), timeout=self.timeout_s, wait_for_ready=True)

    def list(self, states: list[int] | None = None) -> list[types_pb2.Job]:
        return list(self.jobs.ListJobs(services_pb2.ListJobsRequest(states=states or []),
                                       timeout=self.timeout_s, wait_for_ready=True).jobs)

    def cancel(self, job_id: str) -> types_pb2.Job:
        return self.jobs.CancelJob(services_pb2.CancelJobRequest(job_id=job_id), timeout=self.timeout_s, wait_for_ready=True)

    def watch(self, job_id: str, timeout_s: float | None = None) -> Iterator[types_pb2.Job]:
        return self.jobs.WatchJob(services_pb2.WatchJobRequest(job_id=job_id), timeout=timeout_s)

    def predict(self, spec: types_pb2.JobSpec, gpu_types: list[str] | None = None) -> services_pb2.PredictResponse:
        spec = inline_model_config(spec)
        return self.predictor.Predict(services_pb2.PredictRequest(spec=spec, gpu_types=gpu_types or []),
                                      timeout=self.timeout_s, wait_for_ready=True)

    def list_nodes(self) -> list[types_pb2.Node]:
        return list(self.cluster.ListNodes(services_pb2.ListNodesRequest(), timeout=self.timeout_s, wait_for_ready=True).nodes)

    def cluster_summary(self) -> services_pb2.ClusterSummary:
        return self.cluster.GetCluster(services_pb2.GetClusterRequest(), timeout=self.timeout_s,
                                       wait_for_ready=True)
