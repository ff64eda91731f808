"""Policy registry: every policy is reachable by name from the service, the simulator and the CLI."""
from __future__ import annotations

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


def get_policy(name: str, elastic: bool = True) -> Policy:
    """A fresh policy instance (policies may cache per-job derived data, so never share one).

    `elastic=False` turns off has's moves of running jobs (a live scheduler whose orchestrator
    does not execute ReshapeJob); other policies' reshapes are then dropped by the caller."""
    if name not in _POLICIES:
        raise ValueError(f"policy: unknown {name!r}; known: {', '.join(_POLICIES)}")
    if name == "has" and not elastic:
        return HasPolicy(HasConfig(elastic=False))
    return _POLICIES[name]()
