"""Frenzy's runtime: the contract (frenzy.v1, domain, events, topics, job spec and states) and what
every service runs on (bus, config, logs, tracing, security), plus the user SDK (frenzy.client,
frenzy.pipeline). The tools (the `frenzy` command, `frenzy up`, the broker) live in frenzy.tools.

Every service imports from here; nothing here imports a service or a tool
(tests/test_layering.py). `frenzy.Client` (the SDK) loads on first use, so services importing
the contract do not pay for gRPC stubs they do not use.
"""
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "Client":
        from frenzy.client import Client

        return Client
    raise AttributeError(f"module 'frenzy' has no attribute {name!r}")
