"""Policy registry: every policy is reachable by name from the service, the simulator and the CLI."""
from __future__ import annotations

from typing import Callable

from frenzy_scheduler.core import Policy
from frenzy_scheduler.policies.fifo import FifoPolicy

_POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": FifoPolicy,
}


def policy_names() -> list[str]:
    return list(_POLICIES)


def get_policy(name: str) -> Policy:
    if name not in _POLICIES:
        raise ValueError(f"policy: unknown {name!r}; known: {', '.join(_POLICIES)}")
    return _POLICIES[name]()
