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

from frenzy.ports import free_port  # noqa: E402

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[1]
COMMON = ["--seq-len", "64", "--global-batch", "8", "--lr", "3e-3"]


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
    port = free_port()
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
    # MARP plans sequence parallelism whenever tp > 1; gpt2's fused qkv and tied embeddings
    ("tiny-gpt2", {"dp": 1, "tp": 2, "pp": 1, "zero": 0, "micro_batch": 2,
                   "sequence_parallel": True}),
    # tied embeddings split over the first and last stage
    ("tiny-gpt2", {"dp": 1, "tp": 1, "pp": 2, "zero": 0, "micro_batch": 2, "recompute": "full"}),
])
def test_two_ranks_train_and_the_loss_falls(tmp_path, model, plan):
    steps = 15
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


def test_memory_limit_exits_3(tmp_path, capsys):
    code = _main_in_process(tmp_path, ["--model", "tiny-gpt2", "--steps", "5", *COMMON],
                            {"micro_batch": 4}, FRENZY_MEMORY_LIMIT_BYTES=str(4_000_000))
    assert code == 3
    assert "out of memory" in capsys.readouterr().err


def _main_in_process(tmp_path: Path, args: list[str], plan: dict, **extra: str) -> int:
    """Run one rank in this process (no rendezvous happens for one rank without FSDP)."""
    from frenzy_trainer.train import main

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        return main(args, _env(tmp_path, 0, 1, 0, plan, **extra))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("args, plan, field", [
    (["--model", "no-such-model", "--steps", "2", *COMMON], {}, "model"),
    (["--model", "tiny-gpt2", "--steps", "2", *COMMON], {"tp": 3}, "plan.tp"),
    (["--model", "tiny-gpt2", "--steps", "2", *COMMON], {"pp": 5}, "plan.pp"),
    (["--model", "tiny-gpt2", "--steps", "2", *COMMON], {"dp": 2}, "WORLD_SIZE"),
    (["--model", "tiny-gpt2", "--steps", "2", *COMMON], {"micro_batch": 3}, "micro_batch"),
    (["--model", "tiny-gpt2", "--steps", "2", "--seq-len", "4096", "--global-batch", "8"], {}, "seq_len"),
    (["--model", "tiny-gpt2", *COMMON], {}, "steps"),
    (["--model", "tiny-gpt2", "--steps", "2", "--precision", "fp8", *COMMON], {}, "precision"),
])
def test_bad_configuration_exits_2(tmp_path, capsys, args, plan, field):
    assert _main_in_process(tmp_path, args, plan) == 2
    assert field in capsys.readouterr().err


def test_bad_plan_json_exits_2(tmp_path, capsys):
    from frenzy_trainer.train import main

    env = _env(tmp_path, 0, 1, 0, {})
    env["FRENZY_PLAN"] = "{not json"
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert main(["--model", "tiny-gpt2", "--steps", "1", *COMMON], env) == 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "FRENZY_PLAN" in capsys.readouterr().err


def test_taken_master_port_exits_4_naming_the_port(tmp_path):
    """Rank 0 cannot listen on MASTER_PORT: a rendezvous failure (retryable), not a job failure."""
    plan = {"dp": 2, "tp": 1, "pp": 1, "zero": 0, "micro_batch": 1, "recompute": "none"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "frenzy_trainer", "--model", "tiny-gpt2",
                               "--steps", "2", *COMMON],
                              env=_env(tmp_path, 0, 2, port, plan, FRENZY_DIST_TIMEOUT_S="5"),
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert "rendezvous failed" in proc.stderr and f":{port}" in proc.stderr, proc.stderr


def test_missing_master_exits_4_after_the_timeout(tmp_path):
    plan = {"dp": 2, "tp": 1, "pp": 1, "zero": 0, "micro_batch": 1, "recompute": "none"}
    proc = subprocess.run([sys.executable, "-m", "frenzy_trainer", "--model", "tiny-gpt2",
                           "--steps", "2", *COMMON],
                          env=_env(tmp_path, 1, 2, free_port(), plan, FRENZY_DIST_TIMEOUT_S="2"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert "rendezvous failed" in proc.stderr, proc.stderr


def test_job_spec_env_and_text_data(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    spec = {"model": "tiny-llama", "training": {"seq_len": 32, "global_batch_size": 4, "steps": 3}}
    assert _main_in_process(tmp_path, ["--data", str(text)], {"micro_batch": 2},
                            FRENZY_JOB_SPEC=json.dumps(spec)) == 0
    done = _progress(tmp_path)[-1]
    assert done["event"] == "done" and done["tokens"] == 3 * 32 * 4
    assert done["peak_memory_bytes"] > 0


def test_cpu_tracker_counts_live_bytes():
    from frenzy_trainer.progress import LiveTensorBytes, MemoryLimitExceeded

    with LiveTensorBytes() as tracker:
        a = torch.empty(1000, dtype=torch.float32)
        view = a[:10]  # same storage: not counted twice
        b = torch.empty(500, dtype=torch.float32)
        del b
        assert tracker.live_bytes == 4000 and tracker.peak_bytes == 6000
        del a, view
        assert tracker.live_bytes == 0
    with pytest.raises(MemoryLimitExceeded, match="out of memory"):
        with LiveTensorBytes(limit_bytes=1000):
            torch.zeros(1000)


_DTENSOR_PROBE = """
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from frenzy_trainer.progress import LiveTensorBytes
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
with LiveTensorBytes() as tracker:
    local = torch.zeros(500, 1000)  # 2 MB: this rank's shard of a 1000 x 1000 fp32 tensor
    sharded = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                 shape=torch.Size([1000, 1000]), stride=(1000, 1))
    before = tracker.live_bytes
    doubled = sharded * 2
    print(sharded.untyped_storage().nbytes(), tracker.live_bytes - before)
dist.destroy_process_group()
"""


def test_cpu_tracker_counts_a_dtensor_at_its_shard_not_its_global_shape():
    """Tensor parallelism and FSDP2 compute on DTensors, whose wrapper storage reports the
    global shape's bytes (4 MB here); the shard this rank holds is half of it. Counted at the
    global size, a 2-rank TP run of tiny-gpt2 measured 35.8 MB against 21.4 MB."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent / "services" / "node-agent"),
         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _DTENSOR_PROBE], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    wrapper_bytes, counted_bytes = map(int, done.stdout.split())
    assert (wrapper_bytes, counted_bytes) == (4_000_000, 2_000_000)


def test_sigterm_exits_143(tmp_path):
    (proc,) = _launch(tmp_path, ["--model", "tiny-gpt2", "--steps", "100000", *COMMON], {}, world=1)
    progress = tmp_path / "progress.jsonl"
    deadline = time.monotonic() + 60
    while not (progress.exists() and progress.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143, out




def test_pipeline_stages_split_the_layers_evenly_and_keep_their_names():
    from frenzy_trainer.parallelize import stage_layers

    assert [list(stage_layers(5, s, 2)) for s in range(2)] == [[0, 1, 2], [3, 4]]
    assert [len(stage_layers(32, s, 3)) for s in range(3)] == [11, 11, 10]
    for layers in range(1, 9):
        for stages in range(1, layers + 1):
            split = [i for s in range(stages) for i in stage_layers(layers, s, stages)]
            assert split == list(range(layers))
