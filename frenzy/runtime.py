"""Process entry for a service: logging, clean shutdown on SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import signal
from typing import Awaitable, Callable

from frenzy.logs import setup_logging


def run_service(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run main(stop) until it returns; SIGTERM or SIGINT sets `stop`."""
    setup_logging()

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(runner())


async def run_until_stopped(stop: asyncio.Event, *tasks: asyncio.Task) -> None:
    """Wait for stop or for any task to die (a dead consumer must not go unnoticed)."""
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    stopper.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if task is not stopper and task.exception() is not None:
            raise task.exception()
