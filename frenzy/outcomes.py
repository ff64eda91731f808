"""How a job's processes ended: the contract between the trainer, the node agent, the
orchestrator and the predictor's error recorder (docs/trainer.md, "Exit codes").

The trainer exits with one of the codes; the agent turns codes into a reason whose prefix the
orchestrator acts on: OOM is re-planned with more memory, RENDEZVOUS is retried on a new port.
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # anything else; a traceback is on stderr
EXIT_BAD_CONFIG = 2
EXIT_OOM = 3
EXIT_RENDEZVOUS = 4  # the process group did not form: port taken, peer unreachable or late
EXIT_SIGTERM = 143

OOM_REASON = "OOM"
RENDEZVOUS_REASON = "RENDEZVOUS"
PREEMPTED_REASON = "PREEMPTED"
# The trainer writes this file (JSON: step, checkpoint_step) next to its progress file when it
# saved and exited on a checkpoint-now request (SIGUSR1); the agent reports PREEMPTED only when
# it is there, so no exit code a user program returns is read as a preemption.
PREEMPTED_MARKER_FILE = "preempted.json"
CHECKPOINT_NOW_SIGNAL = "SIGUSR1"
