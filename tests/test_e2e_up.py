"""`frenzy up` as users run it: a supervisor that outlives its children's deaths, whose own death
leaves nothing behind, that holds its workdir alone, and whose broker keeps the jobs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.ports import free_port
from frenzy.v1 import types_pb2

pytestmark = pytest.mark.e2e
DATA = Path(__file__).parent / "data"


class Up:
    """One `frenzy up` process in its own session, on the embedded broker."""

    def __init__(self, workdir: Path, *flags: str) -> None:
        self.workdir, self.port = workdir, free_port()
        env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
        env.update(FRENZY_NODE_TIMEOUT_S="5", PYTHONUNBUFFERED="1")
        self.log = open(workdir.parent / f"{workdir.name}-up-{self.port}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "frenzy.tools.cli", "up", "--cluster", str(DATA / "cluster_failover.yaml"),
             "--workdir", str(workdir), "--grpc-port", str(self.port), *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.address = f"127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.tail()
            if b"nodes ready" in Path(self.log.name).read_bytes():
                return
            time.sleep(0.3)
        raise AssertionError(f"frenzy up not ready: {self.tail()}")

    def tail(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def state(self) -> dict:
        return json.loads((self.workdir / "cluster.json").read_text())

    def nodes_json(self) -> list[dict]:
        out = subprocess.run([sys.executable, "-m", "frenzy.tools.cli", "nodes", "--json"], capture_output=True,
                             text=True, env={**os.environ, "FRENZY_ADDR": self.address}, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def spec(name: str, seconds: float) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name=name, model="gpt2",
                             entrypoint=[sys.executable, "-c", f"import time; time.sleep({seconds})"],
                             constraints=types_pb2.Constraints(max_gpus=1),
                             training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8,
                                                               tokens=1_000_000))


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by its parent) is gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def job_pgids(workdir: Path, job_id: str) -> list[int]:
    from frenzy_agent.executor import job_dir_name

    return [json.loads(f.read_text())["pgid"]
            for f in (workdir / "agents").glob(f"*/{job_dir_name(job_id, 0)}/state.json")]


def test_supervised_cluster_survives_an_agent_kill_refuses_a_second_up_and_dies_whole(tmp_path):
    up = Up(tmp_path / "w", "--ephemeral")
    try:
        up.wait_ready()
        # A second cluster in the same workdir is refused while the first runs.
        second = subprocess.run([sys.executable, "-m", "frenzy.tools.cli", "up", "--ephemeral", "--workdir",
                                 str(up.workdir), "--grpc-port", str(free_port())],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and "in use" in second.stderr, second.stderr

        with FrenzyClient(up.address) as client:
            job_id = client.submit(spec("outlives-its-agent", 6))
            job = wait_for(lambda: (j := client.get(job_id)).state == types_pb2.RUNNING and j, 60, "RUNNING")
            node = job.assignments[0].node_id
            [before] = [n for n in up.nodes_json() if n["id"] == node]
            os.kill(before["agent_pid"], signal.SIGKILL)
            done = wait_for(lambda: (j := client.get(job_id)).state in TERMINAL and j, 90, "terminal")
            assert done.state == types_pb2.SUCCEEDED, done.reason
            # The supervisor restarted the agent: a new pid, one restart, and the cluster runs on.
            after = wait_for(lambda: [n for n in up.nodes_json() if n["id"] == node
                                      and n["agent_pid"] != before["agent_pid"]], 30, "new agent pid")[0]
            assert after["agent_restarts"] == 1 and after["state"] == "ready"
            assert up.proc.poll() is None
            assert client.cluster_summary().agent_restarts == 1
            # A job after the kill still runs.
            late = client.submit(spec("after-the-kill", 0.5))
            assert wait_for(lambda: (j := client.get(late)).state in TERMINAL and j, 60,
                            "late job").state == types_pb2.SUCCEEDED
            # One more, still running when the supervisor is SIGKILLed.
            running = client.submit(spec("orphan-candidate", 300))
            wait_for(lambda: client.get(running).state == types_pb2.RUNNING, 60, "RUNNING")

        pids = list(up.state()["pids"].values()) + job_pgids(up.workdir, running)
        assert len(pids) >= 8 and all(alive(p) for p in pids)
        up.proc.kill()  # SIGKILL: no chance to clean up
        wait_for(lambda: not any(alive(p) for p in pids), 20, f"every process to go: {pids}")
    finally:
        up.stop()


def test_persistent_broker_killed_and_restarted_loses_no_job_and_a_new_up_shows_old_jobs(tmp_path):
    up = Up(tmp_path / "p")
    try:
        up.wait_ready()
        assert up.state()["persistent"]
        with FrenzyClient(up.address) as client:
            job_ids = [client.submit(spec(f"through-a-broker-kill-{i}", 1 + i % 3)) for i in range(8)]
            time.sleep(1.5)
            os.kill(up.state()["pids"]["broker"], signal.SIGKILL)
            wait_for(lambda: up.state()["restarts"].get("broker") == 1, 30, "broker restart")
            job_ids += [client.submit(spec("after-the-broker-kill", 0.5))]
            ends = {}
            for job_id in job_ids:
                ends[job_id] = wait_for(lambda: (j := client.get(job_id)).state in TERMINAL and j,
                                        120, f"{job_id} terminal")
            assert {j: e.state for j, e in ends.items()} == {j: types_pb2.SUCCEEDED for j in job_ids}
    finally:
        up.stop()
    again = Up(tmp_path / "p")
    try:
        again.wait_ready()
        with FrenzyClient(again.address) as client:
            listed = {j.id: j.state for j in client.list()}
        assert all(listed.get(j) == types_pb2.SUCCEEDED for j in job_ids), listed
    finally:
        again.stop()
