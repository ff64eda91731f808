"""The Python client for Frenzy's gRPC API."""
from __future__ import annotations

import os
from typing import Iterator

import grpc

from frenzy.v1 import services_pb2, services_pb2_grpc, types_pb2

DEFAULT_ADDRESS = "127.0.0.1:50051"


def default_address() -> str:
    return os.environ.get("FRENZY_ADDR", DEFAULT_ADDRESS)


class FrenzyClient:
    def __init__(self, address: str | None = None, timeout_s: float = 10.0) -> None:
        self.address = address or default_address()
        self.timeout_s = timeout_s
        self.channel = grpc.insecure_channel(self.address)
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
        return self.predictor.Predict(services_pb2.PredictRequest(spec=spec, gpu_types=gpu_types or []),
                                      timeout=self.timeout_s, wait_for_ready=True)

    def list_nodes(self) -> list[types_pb2.Node]:
        return list(self.cluster.ListNodes(services_pb2.ListNodesRequest(), timeout=self.timeout_s, wait_for_ready=True).nodes)

    def cluster_summary(self) -> services_pb2.ClusterSummary:
        return self.cluster.GetCluster(services_pb2.GetClusterRequest(), timeout=self.timeout_s,
                                       wait_for_ready=True)
