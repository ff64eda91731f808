"""The reference trainer as a node agent runs it: real processes, gloo, torchrun environment."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[1]
COMMON = ["--seq-len", "64", "--global-batch", "8", "--lr", "3e-3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path, rank: int, world: int, port: int, plan: dict, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRENZY_", "OMP_"))}
    env.update({
        "WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "CUDA_VISIBLE_DEVICES": "", "FRENZY_PLAN": json.dumps(plan),
        "FRENZY_PROGRESS_FILE": str(tmp_path / "progress.jsonl"), "FRENZY_DIST_TIMEOUT_S": "60",
        "PYTHONUNBUFFERED": "1", **extra})
    return env


def _launch(tmp_path: Path, args: list[str], plan: dict, world: int = 2, **extra: str):
    port = _free_port()
    return [subprocess.Popen([sys.executable, "-m", "frenzy_trainer", *args],
                             env=_env(tmp_path, rank, world, port, plan, **extra), cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for rank in range(world)]


def _wait(procs, timeout_s: float = 120) -> list[tuple[int, str]]:
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=timeout_s)
        results.append((proc.returncode, out))
    return results


def _progress(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("model, plan", [
    ("tiny-gpt2", {"dp": 2, "tp": 1, "pp": 1, "zero": 0, "micro_batch": 2, "recompute": "none"}),
    ("tiny-llama", {"dp": 2, "tp": 1, "pp": 1, "zero": 3, "micro_batch": 2, "recompute": "full"}),
])
def test_two_ranks_train_and_the_loss_falls(tmp_path, model, plan):
    steps = 25
    results = _wait(_launch(tmp_path, ["--model", model, "--steps", str(steps), *COMMON], plan))
    for code, out in results:
        assert code == 0, out
    lines = _progress(tmp_path)
    per_step, done = lines[:-1], lines[-1]
    assert [line["step"] for line in per_step] == list(range(1, steps + 1))  # rank 0 only
    assert done["event"] == "done" and done["steps"] == steps and done["world_size"] == 2
    assert done["tokens"] == steps * 64 * 8
    losses = [line["loss"] for line in per_step]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses
    assert all(line["peak_memory_bytes"] > 0 for line in per_step)
    assert set(per_step[0]) == {"step", "steps", "tokens", "loss", "peak_memory_bytes", "time_s"}


def test_memory_limit_exits_3(tmp_path):
    plan = {"dp": 2, "zero": 0, "micro_batch": 4}
    results = _wait(_launch(tmp_path, ["--model", "tiny-gpt2", "--steps", "5", *COMMON], plan,
                            FRENZY_MEMORY_LIMIT_BYTES=str(4_000_000)))
    for code, out in results:
        assert code == 3, out
        assert "out of memory" in out


@pytest.mark.parametrize("args, plan, field", [
    (["--model", "no-such-model", "--steps", "2", *COMMON], {}, "model"),
    (["--model", "tiny-gpt2", "--steps", "2", *COMMON], {"tp": 2}, "not supported by the reference trainer"),
    (["--model", "tiny-gpt2", "--steps", "2", *COMMON], {"micro_batch": 3}, "micro_batch"),
    (["--model", "tiny-gpt2", "--steps", "2", "--seq-len", "4096", "--global-batch", "8"], {}, "seq_len"),
    (["--model", "tiny-gpt2", *COMMON], {}, "steps"),
])
def test_bad_configuration_exits_2(tmp_path, args, plan, field):
    (code, out), = _wait(_launch(tmp_path, args, plan, world=1))
    assert code == 2, out
    assert field in out


def test_sigterm_exits_143(tmp_path):
    (proc,) = _launch(tmp_path, ["--model", "tiny-gpt2", "--steps", "100000", *COMMON], {}, world=1)
    progress = tmp_path / "progress.jsonl"
    deadline = time.monotonic() + 60
    while not (progress.exists() and progress.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143, out


def test_job_spec_env_and_text_data(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    spec = {"model": "tiny-llama", "training": {"seq_len": 32, "global_batch_size": 4, "steps": 3}}
    (proc,) = _launch(tmp_path, ["--data", str(text)], {"micro_batch": 2}, world=1,
                      FRENZY_JOB_SPEC=json.dumps(spec))
    (code, out), = _wait([proc])
    assert code == 0, out
    done = _progress(tmp_path)[-1]
    assert done["event"] == "done" and done["tokens"] == 3 * 32 * 4
