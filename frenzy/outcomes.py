"""How a job's processes ended: the contract between the trainer, the node agent, the
orchestrator and the predictor's error recorder (docs/trainer.md, "Exit codes").

An exit code alone never carries a meaning the system acts on: a user program may exit 3 or 4
for its own reasons. A process that wants its end interpreted (out of memory, the process group
did not form, preempted) writes a status file first, at the path the agent gives it in
FRENZY_STATUS_FILE, one per rank:

    {"outcome": "OOM", "detail": "CUDA out of memory. Tried to allocate 2.00 GiB"}

The agent reads it (with the exit code and log tails) in one pure function,
`frenzy_agent.classify.classify`, and reports a reason whose prefix the orchestrator acts on:
OOM is re-planned with more memory, RENDEZVOUS is retried on a new port, PREEMPTED (issue 13's
checkpoint-and-yield) is re-queued. Without a status file, a non-zero exit is "exit code N".
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from frenzy import jobvars

EXIT_OK = 0
EXIT_FAILED = 1  # anything else; a traceback is on stderr
EXIT_BAD_CONFIG = 2
EXIT_OOM = 3  # the trainer's code; interpreted only together with an OOM status file
EXIT_RENDEZVOUS = 4  # the process group did not form: port taken, peer unreachable or late
EXIT_SIGTERM = 143

OOM_REASON = "OOM"
RENDEZVOUS_REASON = "RENDEZVOUS"
PREEMPTED_REASON = "PREEMPTED"
INTERPRETED = (OOM_REASON, RENDEZVOUS_REASON, PREEMPTED_REASON)
# The agent's own verdict, not a status file: the processes vanished without recording an exit
# code (killed with their agent or container). Nothing the program did ended it, so the
# orchestrator runs the job again (from its last checkpoint), as after a lost node.
LOST_REASON = "LOST"

# Checkpoint-now (preemption, resize, migration): the agent sends this signal; the trainer saves
# at its next step boundary, writes a PREEMPTED status (with the checkpoint step) and exits 0.
CHECKPOINT_NOW_SIGNAL = "SIGUSR1"
MAX_STATUS_BYTES = 4096  # a status file is a line; a bigger one is not ours


@dataclass(frozen=True)
class RankStatus:
    """What one rank's status file says about its end."""

    outcome: str  # one of INTERPRETED
    detail: str = ""
    checkpoint_step: int | None = None  # PREEMPTED: the committed checkpoint it saved before exiting


def write_status(outcome: str, detail: str = "", path: str | os.PathLike | None = None,
                 checkpoint_step: int | None = None) -> None:
    """Record an interpreted outcome before exiting. A no-op outside an agent (no path given and
    no FRENZY_STATUS_FILE): a trainer run by hand still exits with its code. A PREEMPTED rank
    names the checkpoint it committed (`checkpoint_step`), which the agent reports."""
    if outcome not in INTERPRETED:
        raise ValueError(f"outcome must be one of {INTERPRETED}, not {outcome!r}")
    target = path or os.environ.get(jobvars.STATUS_FILE, "")
    if not target:
        return
    tmp = Path(f"{target}.tmp")
    record: dict = {"outcome": outcome, "detail": detail[:1000]}
    if checkpoint_step is not None:
        record["checkpoint_step"] = int(checkpoint_step)
    tmp.write_text(json.dumps(record) + "\n")
    tmp.replace(target)  # a reader never sees half a file


def read_status(path: Path) -> RankStatus | None:
    """The rank's status, or None when it wrote none (or something that is not one)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_STATUS_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_STATUS_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("outcome") not in INTERPRETED:
        return None
    step = data.get("checkpoint_step")
    return RankStatus(data["outcome"], str(data.get("detail", "")),
                      step if isinstance(step, int) and not isinstance(step, bool) else None)
