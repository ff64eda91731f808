"""Process entry for a service: logging, clean shutdown on SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import gc
import signal
from typing import Awaitable, Callable

from frenzy import tracing
from frenzy.config import BusSettings
from frenzy.logs import setup_logging

HEALTHY = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"


async def serve_health(port: int, host: str = "0.0.0.0") -> asyncio.Server | None:
    """A health endpoint that answers while the service's event loop runs.

    That is the right signal for these services: each runs its consumers as tasks under
    `run_until_stopped`, which ends the process when any of them dies, so a live process with a
    responsive loop is a working one. Any request path gets the answer; 0 = off.
    """
    if not port:
        return None

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.write(HEALTHY)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, OSError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(answer, host, port)


def run_service(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run main(stop) until it returns; SIGTERM or SIGINT sets `stop`. With FRENZY_HEALTH_PORT
    set, GET /healthz answers 200 on that port meanwhile (probes of the Kafka-only services)."""
    setup_logging()
    tracing.setup()  # off unless FRENZY_OTLP_ENDPOINT is set
    freeze_startup_heap()

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        health = await serve_health(BusSettings().health_port)
        try:
            await main(stop)
        finally:
            if health is not None:
                health.close()

    asyncio.run(runner())


def freeze_startup_heap() -> None:
    """Keep what the imports built out of every later full garbage collection.

    A full (generation 2) collection walks every tracked object, and most of a service's
    objects are its modules, classes and protobuf descriptors, which live as long as the
    process. Walking them stopped the scheduler's event loop for 71-123 ms, once in each of two
    latency-bench runs, while submissions arrived (docs/reaction-latency.md, twelfth round).
    `gc.freeze()` moves them to a permanent generation that collections skip; collecting first
    leaves no import-time garbage frozen in it. Instagram's services do the same
    ("Dismissing Python Garbage Collection at Instagram"; CPython's gc.freeze documentation)."""
    gc.collect()
    gc.freeze()


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
