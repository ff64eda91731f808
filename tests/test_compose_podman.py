"""The compose cluster, run for real under podman-compose (deploy/compose/README.md, "Under podman,
offline"): the image built on a debootstrapped Debian from a local wheelhouse, the embedded broker
in place of Apache Kafka (compose.podman.yaml), a job submitted from the host through the published
gRPC port, and an agent container killed and restarted by compose.

Skips without root, podman, podman-compose or debootstrap (.ci/run installs them), or when a port
compose.yaml publishes is taken on this host.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import grpc
import pytest

import frenzy
from frenzy.security.clientconfig import read_client_config
from frenzy.v1 import types_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "deploy" / "compose"
PROJECT = "frenzy-compose-test"
PUBLISHED_PORTS = (50051, 9464, 6066, 8265)
AGENTS = ("a100-0", "a100-1", "v100-0", "t4-0")
ENV = {**os.environ, "CONTAINERS_CONF": str(COMPOSE / "containers.conf"),
       "FRENZY_DASHBOARD_LOGIN_TICKET": "compose-test"}
SPEC = {"name": "compose", "model": "gpt2",
        "training": {"seq_len": 1024, "global_batch_size": 32, "tokens": 20_000_000}}


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _missing() -> str:
    if os.geteuid() != 0:
        return "podman here works as root only"
    tools = [t for t in ("podman", "podman-compose", "debootstrap", "runc") if not shutil.which(t)]
    if tools:
        return f"missing {', '.join(tools)} (.ci/run installs them)"
    taken = [p for p in PUBLISHED_PORTS if _port_taken(p)]
    return f"ports {taken} that compose.yaml publishes are taken" if taken else ""


def compose(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["podman-compose", "-p", PROJECT, "-f", str(COMPOSE / "compose.yaml"),
                           "-f", str(COMPOSE / "compose.podman.yaml"), *args],
                          capture_output=True, text=True, env=ENV, timeout=timeout_s)


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=ENV, timeout=60,
                          check=True).stdout.strip()


def wait_until(check, timeout_s: float, what: str, detail=lambda: ""):
    """`detail`: what to print on a timeout (CI keeps only the printed output)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except grpc.RpcError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s}s: {what}\n{detail()}")


def container_log_tail(container: str, lines: int = 40) -> str:
    logs = subprocess.run(["podman", "logs", "--tail", str(lines), container], capture_output=True,
                          text=True, env=ENV, timeout=60)
    return f"{container}'s last lines:\n{logs.stdout[-6000:]}{logs.stderr[-3000:]}"


@pytest.fixture(scope="module")
def cluster():
    reason = _missing()
    if reason:
        pytest.skip(f"compose under podman: {reason}")
    built = subprocess.run([str(COMPOSE / "podman-build.sh")], capture_output=True, text=True, env=ENV,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    compose("down", "-t", "2")
    up = compose("up", "-d", "--no-build")
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        # security-init wrote the admin's client config (address, token, CA) into the security
        # volume, as `frenzy up` does under its workdir; the host reads it from the volume.
        volume = podman("volume", "inspect", f"{PROJECT}_security", "-f", "{{.Mountpoint}}")
        config = wait_until(lambda: read_client_config(Path(volume) / "client.json"), 60,
                            "the client config written")
        with frenzy.Client(config.address, timeout_s=30, token=config.token,
                           ca_pem=config.ca_pem) as client:
            wait_until(lambda: sum(n.state == types_pb2.NODE_READY for n in client.list_nodes()) == 4,
                       180, "four agents ready")
            yield client
    finally:
        logs = compose("logs", timeout_s=60)
        (ROOT / "test-artifacts").mkdir(exist_ok=True)
        (ROOT / "test-artifacts" / "compose-podman.log").write_text(logs.stdout[-200_000:])
        compose("down", "-t", "2")


def test_a_job_submitted_from_the_host_runs_to_succeeded_with_its_logs(cluster):
    job = cluster.wait(cluster.submit(SPEC, job_id="compose-1"), timeout_s=180)
    assert job.state == types_pb2.SUCCEEDED, job.reason
    text = b"".join(c.data for c in cluster.logs("compose-1", rank=0)).decode()
    assert "step " in text


def test_a_killed_agent_container_is_restarted_and_its_node_and_logs_come_back(cluster):
    # About a minute at the cluster's time scale on 4 T4s (MARP: 1.6 h; FRENZY_TIME_SCALE 0.01):
    # long enough to be killed mid-run, and it runs again whole (the synthetic workload keeps
    # no checkpoint), so every extra token is test time twice over
    long_spec = {**SPEC, "name": "long", "constraints": {"gpu_types": ["T4"], "max_gpus": 4},
                 "training": {**SPEC["training"], "tokens": 300_000_000}}
    job_id = cluster.submit(long_spec, job_id="compose-killed")
    job = wait_until(lambda: (j := cluster.get(job_id)).state == types_pb2.RUNNING and j, 120, "running")
    node = job.assignments[0].node_id
    wait_until(lambda: list(cluster.logs(job_id)), 30, "first log lines shipped")
    container = f"{PROJECT}_{node}_1"
    assert cluster.get(job_id).state == types_pb2.RUNNING, "the job ended before the kill"
    pid = int(podman("inspect", "-f", "{{.State.Pid}}", container))
    os.kill(pid, 9)  # the agent container's main process dies, as on a crash
    wait_until(lambda: int(podman("inspect", "-f", "{{.RestartCount}}", container)) >= 1
               and podman("inspect", "-f", "{{.State.Status}}", container) == "running", 60, "restarted")
    # Its processes died with the container; the restarted agent reports them LOST and the
    # orchestrator runs the job again as a new attempt.
    killed = wait_until(lambda: (j := cluster.get(job_id)).state in (types_pb2.SUCCEEDED, types_pb2.FAILED)
                        and j, 600, "the killed job ends",
                        lambda: f"{cluster.get(job_id)}\n{container_log_tail(container)}\n"
                                f"{container_log_tail(f'{PROJECT}_orchestrator_1')}")
    assert killed.state == types_pb2.SUCCEEDED and killed.attempt >= 1, killed
    wait_until(lambda: any(n.id == node and n.state == types_pb2.NODE_READY and n.gpus_free == n.gpus_total
                           for n in cluster.list_nodes()), 60, "the node ready with its GPUs free")
    assert list(cluster.logs(job_id)), "lines shipped before the kill are still readable"
    after = cluster.wait(cluster.submit({**long_spec, "training": SPEC["training"]}), timeout_s=180)
    assert after.state == types_pb2.SUCCEEDED, after.reason
