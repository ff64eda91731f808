"""A running job's progress as the policies read it: the share of its work left, and the work
a move would throw away.

Why a module of its own: the policies read these of most running jobs at most decisions, and
as methods of `RunningJob` (core.py, which runs as Python) each read from the compiled
policies was an interpreted call of about 1,500 instructions, 6 % of has's on the first 1,500
trace jobs (docs/has-performance.md, thirtieth round). Compiled with them (`native.MODULES`),
as `actions` is; `RunningJob`'s methods call these, so each rule is written once."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from frenzy_scheduler.core import RunningJob


def remaining_fraction(run: RunningJob, now_s: float) -> float:
    """Fraction of the job's work left at `now_s`."""
    begin_s, rate = run.progress
    elapsed_s = now_s - begin_s
    done = rate * (elapsed_s if elapsed_s > 0.0 else 0.0)
    if not done < math.inf:  # an instant job (no span), or one with no rate
        return 0.0
    left = run.fraction_at_start - done
    return left if left > 0.0 else 0.0


def checkpoint_age_s(run: RunningJob, now_s: float) -> float:
    """Productive seconds since the newest committed checkpoint (or since this run's restore
    ended, which restored one or started from scratch)."""
    begin_s = max(run.start_time_s, run.restoring_until_s)
    if run.checkpoint_interval_s > 0:
        return max(0.0, now_s - begin_s) % run.checkpoint_interval_s
    return max(0.0, now_s - max(begin_s, run.last_checkpoint_s))


def redo_s(run: RunningJob, now_s: float) -> float:
    """The work a move would throw away: none when the job saves on request, else the work
    since its last committed checkpoint."""
    return 0.0 if run.saves_on_request else checkpoint_age_s(run, now_s)
