"""Job states grouped by what they mean to a reader: one place for the client, the CLI, the demo
and the dashboard. (The orchestrator's lifecycle table and the scheduler keep their own until
their owners move them here.)"""
from __future__ import annotations

from frenzy.v1 import types_pb2

TERMINAL = frozenset({types_pb2.SUCCEEDED, types_pb2.FAILED, types_pb2.CANCELLED})
# Jobs that hold GPUs, and jobs that wait for them.
HOLDING = frozenset({types_pb2.PLACED, types_pb2.LAUNCHING, types_pb2.RUNNING})
WAITING = frozenset({types_pb2.SUBMITTED, types_pb2.PLANNED, types_pb2.QUEUED})
