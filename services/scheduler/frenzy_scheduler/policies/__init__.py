"""Policy registry: every policy is reachable by name from the service, the simulator and the CLI."""
from __future__ import annotations

from frenzy_scheduler.native import extend as _use_native_build

_use_native_build(__path__, __name__)  # before any policy is imported (native.py)

from dataclasses import replace
from typing import Callable

from frenzy_scheduler.core import Policy
from frenzy_scheduler.policies.fifo import FifoPolicy
from frenzy_scheduler.policies.frenzy import FrenzyNarrowPolicy, FrenzyPolicy
from frenzy_scheduler.policies.has import HasConfig, HasPolicy
from frenzy_scheduler.policies.sia import SiaPolicy, SiaStaticPolicy

_POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": FifoPolicy,
    "frenzy": FrenzyPolicy,
    "frenzy-narrow": FrenzyNarrowPolicy,
    "sia": SiaPolicy,
    "sia-static": SiaStaticPolicy,
    "has": HasPolicy,
}

BASELINES = ("fifo", "frenzy", "frenzy-narrow", "sia", "sia-static")


def policy_names() -> list[str]:
    return list(_POLICIES)


def get_policy(name: str, elastic: bool = True, min_gain_s: float | None = None,
               min_gain_fraction: float | None = None,
               reshape_interval_s: float | None = None) -> Policy:
    """A fresh policy instance (policies may cache per-job derived data, so never share one).

    `elastic=False` turns off has's moves of running jobs (a live scheduler with
    FRENZY_RESHAPE_JOBS off); other policies' reshapes are then dropped by the caller. The
    minimum gain of a move (has), when given, replaces the policy's own, and so does the
    shortest time between two moves of a job (`reshape_interval_s`: the live scheduler passes
    the orchestrator's FRENZY_RESHAPE_MIN_INTERVAL_S, so has never plans a move the
    orchestrator's guard would refuse)."""
    if name not in _POLICIES:
        raise ValueError(f"policy: unknown {name!r}; known: {', '.join(_POLICIES)}")
    if name == "has":
        config = replace(HasConfig(), elastic=elastic)
        if min_gain_s is not None:
            config = replace(config, min_gain_s=min_gain_s)
        if min_gain_fraction is not None:
            config = replace(config, min_gain_fraction=min_gain_fraction)
        if reshape_interval_s is not None:
            config = replace(config, reshape_interval_s=reshape_interval_s)
        return HasPolicy(config)
    return _POLICIES[name]()
