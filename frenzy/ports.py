"""Loopback ports: pick a free one, wait until one answers.

In the runtime rather than the tools because a job process needs one too: the reference trainer
picks its rendezvous port with `free_port` when it runs alone.
"""
from __future__ import annotations

import random
import socket
import time
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# The lowest port `free_port` hands out: above the registered services that a developer's
# machine commonly runs (databases, brokers, dev servers sit in 1024-9999).
LOWEST_PICKED_PORT = 10000
PICK_ATTEMPTS = 64
# The ports a multi-rank job's rank 0 serves its rendezvous on: torch's default port and up,
# one per (job, attempt), drawn by the orchestrator (`frenzy_orchestrator.core.master_port`).
# `free_port` never hands one out, so a service started on a picked port (a cluster's gRPC or
# dashboard port, say) cannot take a job's master port first: the job's ranks would exit
# with EADDRINUSE and the attempt be retried (a CI run lost an e2e test's exact attempt count
# so, with a dashboard on 30524).
RENDEZVOUS_PORTS = range(29500, 32500)


def ephemeral_port_range(range_file: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux's default when the
    file cannot be read elsewhere)."""
    try:
        low, high = range_file.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """A port nothing is bound to, chosen below the kernel's ephemeral range.

    Why not bind port 0: that returns an *ephemeral* port, and the caller closes it before
    the service it is for binds it, often seconds later in another process. In between, any
    outgoing connection (a Kafka client's, a gRPC channel's) may take it as its source port,
    and the service then fails with EADDRINUSE: a cluster start-up in CI failed so. No
    connection takes a source port below the ephemeral range, so a port there stays free
    unless another `free_port` caller picks the same one; picking at random among some
    twenty thousand makes that rare. Jobs' rendezvous ports (`RENDEZVOUS_PORTS`) are left
    out. Where the range leaves no room below it, port 0 it is.
    """
    low, _ = ephemeral_port_range(range_file)
    if low - LOWEST_PICKED_PORT >= 1000:
        picker = random.SystemRandom()
        for _ in range(PICK_ATTEMPTS):
            port = picker.randrange(LOWEST_PICKED_PORT, low)
            if port not in RENDEZVOUS_PORTS and _bindable(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bindable(port: int) -> bool:
    """Whether a listener could bind `port` on every IPv4 address now. Without SO_REUSEADDR,
    so a port still in TIME_WAIT counts as taken too."""
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def wait_for_port(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s}s")
