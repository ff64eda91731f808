"""Every Kafka topic, named in one place, with its key and partition count."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    name: str
    key: str  # what the record key holds, for per-entity order
    partitions: int
    compacted: bool = False  # keep only the latest record per key (state topics)
    traced: bool = True  # records carry W3C trace context (frenzy/tracing.py); not telemetry


def namespace_prefix(namespace: str) -> str:
    """What FRENZY_NAMESPACE puts before every topic and consumer-group name ("" for none)."""
    return f"{namespace}." if namespace else ""


JOBS_SUBMITTED = Topic("frenzy.jobs.submitted", "job id", 4)
# Compacted: the latest plan per job and availability per node rebuild a restarted scheduler.
JOBS_PLANNED = Topic("frenzy.jobs.planned", "job id", 4, compacted=True)
JOBS_PLACED = Topic("frenzy.jobs.placed", "job id", 4)
JOBS_STATUS = Topic("frenzy.jobs.status", "job id", 4)
NODES_HEARTBEATS = Topic("frenzy.nodes.heartbeats", "node id", 4, traced=False)
CLUSTER_EVENTS = Topic("frenzy.cluster.events", "node id", 4, compacted=True)
AGENT_COMMANDS = Topic("frenzy.agent.commands", "node id", 8)
# The orchestrator's durable state: keys "job/<id>", "early/<id>", "meta/epoch", "marker/<p>".
ORCHESTRATOR_STATE = Topic("frenzy.orchestrator.state", "record kind/entity id", 4, compacted=True)
# Rank logs as LogChunk records (frenzy/joblogs.py); time-retained, read by `frenzy logs`.
JOBS_LOGS = Topic("frenzy.jobs.logs", "job id", 4)
DEADLETTER = Topic("frenzy.deadletter", "original key", 1)

ALL_TOPICS: tuple[Topic, ...] = (
    JOBS_SUBMITTED, JOBS_PLANNED, JOBS_PLACED, JOBS_STATUS,
    NODES_HEARTBEATS, CLUSTER_EVENTS, AGENT_COMMANDS, ORCHESTRATOR_STATE, JOBS_LOGS, DEADLETTER,
)
