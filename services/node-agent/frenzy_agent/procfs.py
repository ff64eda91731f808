"""What /proc says about a process: its state and when it started. A pid alone is reused once
its process is reaped (and, after a container restart, by the first processes of a fresh pid
namespace); a pid with its start time names one process."""
from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def boot_id() -> str:
    """This boot of the kernel (read once: it cannot change under a running agent); processes
    recorded under another boot are all gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (state) on: the name before it may hold spaces and ")".
    Kept off the launch path for ranks that are exec'ing: read there, it took the launch's
    spawn p50 from 11-13 to 19 ms (docs/reaction-latency.md, ninth round)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()
    except OSError:
        return None


def start_ticks(fields: list[str] | None) -> int | None:
    """Field 22 (starttime): clock ticks since boot at the process's start; None: gone."""
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_start_ticks(pid: int) -> int | None:
    return start_ticks(stat_fields(pid))
