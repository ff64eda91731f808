"""Prometheus metrics of the orchestrator, on their own registry (no process-global state)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from frenzy.v1 import types_pb2

if TYPE_CHECKING:
    from frenzy_orchestrator.core import OrchestratorCore

# (predicted - measured) / measured: negative buckets are under-predictions (OOM risk).
ERROR_BUCKETS = (-0.5, -0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
LAG_BUCKETS_S = (0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
                 1.5, 2.5, 5.0, 10.0)


class OrchestratorMetrics:
    def __init__(self, core: "OrchestratorCore") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.heartbeat_lag_s = Histogram(
            "frenzy_heartbeat_lag_seconds", "Heartbeat produced-to-processed delay",
            buckets=LAG_BUCKETS_S, registry=self.registry)
        self.memory_prediction_error = Histogram(
            "frenzy_memory_prediction_error_ratio",
            "(predicted - measured) / measured peak memory per GPU of finished jobs",
            ["gpu_type"], buckets=ERROR_BUCKETS, registry=self.registry)
        self.registry.register(_StateCollector(core))

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)


class _StateCollector(Collector):
    """Gauges read from the core's state at scrape time, so they are never stale."""

    def __init__(self, core: "OrchestratorCore") -> None:
        self.core = core

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("frenzy_jobs", "Jobs by lifecycle state", labels=["state"])
        counts: dict[str, int] = {name: 0 for name in types_pb2.JobState.keys()
                                  if name != "JOB_STATE_UNSPECIFIED"}
        for rec in list(self.core.jobs.values()):
            counts[types_pb2.JobState.Name(rec.job.state)] += 1
        for state, count in counts.items():
            jobs.add_metric([state], count)
        yield jobs
        summary = self.core.cluster_summary()
        gpus = GaugeMetricFamily("frenzy_gpus", "GPUs by type and status", labels=["gpu_type", "status"])
        for t in summary.gpu_types:
            gpus.add_metric([t.gpu_type, "free"], t.free)
            gpus.add_metric([t.gpu_type, "allocated"], t.allocated)
            gpus.add_metric([t.gpu_type, "total"], t.total)
        yield gpus
        nodes = GaugeMetricFamily("frenzy_nodes", "Nodes by state", labels=["state"])
        nodes.add_metric(["ready"], summary.nodes_ready)
        nodes.add_metric(["lost"], summary.nodes_lost)
        yield nodes
