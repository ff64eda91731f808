"""Policy registry: every policy is reachable by name from the service, the simulator and the CLI."""
from __future__ import annotations

from typing import Callable

from frenzy_scheduler.core import Policy
from frenzy_scheduler.policies.fifo import FifoPolicy
from frenzy_scheduler.policies.frenzy import FrenzyNarrowPolicy, FrenzyPolicy
from frenzy_scheduler.policies.has import HasPolicy
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


def get_policy(name: str) -> Policy:
    """A fresh policy instance (policies may cache per-job derived data, so never share one)."""
    if name not in _POLICIES:
        raise ValueError(f"policy: unknown {name!r}; known: {', '.join(_POLICIES)}")
    return _POLICIES[name]()
