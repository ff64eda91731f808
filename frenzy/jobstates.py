"""Job states grouped by what they mean: the one place for the orchestrator's lifecycle, the
scheduler, the client, the CLI, the demo and the dashboard."""
from __future__ import annotations

from frenzy.v1 import types_pb2

TERMINAL = frozenset({types_pb2.SUCCEEDED, types_pb2.FAILED, types_pb2.CANCELLED})
# Jobs that hold GPUs, and jobs that wait for them.
HOLDING = frozenset({types_pb2.PLACED, types_pb2.LAUNCHING, types_pb2.RUNNING})
WAITING = frozenset({types_pb2.SUBMITTED, types_pb2.PLANNED, types_pb2.QUEUED})
