"""`free_port` hands out ports that no outgoing connection can take in the meantime."""
from __future__ import annotations

import socket
from pathlib import Path

from frenzy.ports import (LOWEST_PICKED_PORT, RENDEZVOUS_PORTS, _bindable, ephemeral_port_range,
                          free_port)


def test_free_port_is_below_the_ephemeral_range_and_bindable():
    low, _ = ephemeral_port_range()
    for _ in range(20):
        port = free_port()
        assert LOWEST_PICKED_PORT <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_free_port_skips_a_port_in_use(tmp_path: Path):
    """A port a listener holds is never handed out: among 1,000 candidates, 5,000 picks
    would draw it with probability 0.993 if the check were missing."""
    range_file = tmp_path / "range"
    range_file.write_text(f"{LOWEST_PICKED_PORT + 1000} 60999\n")
    held = socket.socket()
    held.bind(("127.0.0.1", free_port(range_file)))
    held.listen()
    try:
        taken = held.getsockname()[1]
        assert not _bindable(taken)
        assert all(free_port(range_file) != taken for _ in range(5000))
    finally:
        held.close()


def test_free_port_falls_back_to_the_kernel_when_no_room_is_left_below(tmp_path: Path):
    range_file = tmp_path / "range"
    range_file.write_text("1024 65000\n")
    port = free_port(range_file)
    assert 1024 <= port <= 65000


def test_an_unreadable_range_file_means_linux_defaults(tmp_path: Path):
    assert ephemeral_port_range(tmp_path / "missing") == (32768, 60999)


def test_free_port_never_hands_out_a_jobs_rendezvous_port(tmp_path: Path):
    """A service on a picked port cannot take a job's master port first. Below 32768 the
    rendezvous ports are 3,000 of 22,768 candidates: 2,000 picks would draw one with
    probability above 1 - 1e-100 if they were not left out."""
    range_file = tmp_path / "range"
    range_file.write_text("32768 60999\n")
    assert all(free_port(range_file) not in RENDEZVOUS_PORTS for _ in range(2000))
