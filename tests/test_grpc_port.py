"""A taken gRPC port is refused, not shared (an orphaned orchestrator used to answer half the
calls of a new cluster's clients)."""
from __future__ import annotations

import asyncio

import pytest

from frenzy.ports import free_port
from frenzy_orchestrator.api import start_grpc


def test_a_second_orchestrator_cannot_share_the_port():
    async def go() -> None:
        port = free_port()
        first = await start_grpc(None, "127.0.0.1", port)  # type: ignore[arg-type]
        try:
            with pytest.raises(RuntimeError, match="(?i)bind|listen"):
                await start_grpc(None, "127.0.0.1", port)  # type: ignore[arg-type]
        finally:
            await first.stop(None)

    asyncio.run(go())
