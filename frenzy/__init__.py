"""Frenzy common package: contracts, bus, config, domain types, client and CLI.

Every service imports from here; nothing here imports a service. `frenzy.Client` (the SDK) loads
on first use, so services importing the contract do not pay for gRPC stubs they do not use.
"""
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "Client":
        from frenzy.client import Client

        return Client
    raise AttributeError(f"module 'frenzy' has no attribute {name!r}")
