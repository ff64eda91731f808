"""GPU check for a machine with an NVIDIA driver: the node agent's real NVML path, end to end.

    PYTHONPATH=.:services/node-agent python3 bench/gpu_check.py [--train] [--json FILE]

Needs only nvidia-ml-py (and torch for checks 3-4), not the rest of Frenzy's dependencies.

1. discovery: `discover_nvml()` as the agent runs it without `--gpus`: each GPU's NVML name,
   catalog type, memory total / used, UUID and health;
2. heartbeat: one `NvmlMonitor` reading per GPU (what the agent's NodeHeartbeat carries);
3. visibility (torch with CUDA): a child process per GPU with CUDA_VISIBLE_DEVICES=<UUID>, as
   the agent launches a job, must see exactly that device (NVML's name and total memory);
4. --train: the reference trainer as one rank on GPU 0 (tiny-gpt2, 20 steps): it exits 0, the
   loss falls, and its measured peak (torch.cuda.max_memory_allocated) is > 0 and at most the
   most memory NVML saw in use on that GPU while it ran.

Prints the inventory and one line per check; exit 0 if all pass, 1 if one fails, 2 when NVML
is unavailable (the agent would refuse to start without --gpus, with the same reason).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "services" / "node-agent"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from frenzy_agent.gpus import Gpu, NvmlMonitor, NvmlUnavailable, discover_nvml  # noqa: E402

GIB = 1024**3
_PROBE = ("import json, torch; p = torch.cuda.get_device_properties(0); "
          "print(json.dumps({'count': torch.cuda.device_count(), 'name': p.name, "
          "'total': p.total_memory}))")


def show(gpus: list[Gpu]) -> None:
    print(f"{'idx':>3}  {'catalog type':<16} {'total GiB':>9} {'used GiB':>8}  {'health':<9} uuid / NVML name")
    for g in gpus:
        print(f"{g.index:>3}  {g.gpu_type:<16} {g.memory_total_bytes / GIB:>9.1f} "
              f"{g.memory_used_bytes / GIB:>8.2f}  {'healthy' if g.healthy else 'UNHEALTHY':<9} "
              f"{g.uuid} / {g.name}{'  ' + g.error if g.error else ''}")


def child_env(uuid: str) -> dict[str, str]:
    pythonpath = os.pathsep.join([str(ROOT), str(ROOT / "services" / "node-agent"),
                                  os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "CUDA_VISIBLE_DEVICES": uuid, "PYTHONPATH": pythonpath,
            "PYTHONUNBUFFERED": "1"}


def check_visibility(gpus: list[Gpu]) -> list[str]:
    failures = []
    for g in gpus:
        if not g.healthy or not g.uuid:
            continue
        out = subprocess.run([sys.executable, "-c", _PROBE], env=child_env(g.uuid),
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            failures.append(f"GPU {g.index}: torch with CUDA_VISIBLE_DEVICES={g.uuid} failed: "
                            f"{out.stderr.strip()[-300:]}")
            continue
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        # NVML's total includes memory the driver reserves; torch reports what CUDA offers.
        same = seen["count"] == 1 and seen["name"] == g.name and \
            abs(seen["total"] - g.memory_total_bytes) < 0.05 * g.memory_total_bytes
        print(f"visibility GPU {g.index}: torch sees {seen} -> {'ok' if same else 'MISMATCH'}")
        if not same:
            failures.append(f"GPU {g.index}: UUID {g.uuid} shows {seen}, NVML says {g.name}")
    return failures


def check_training(gpu: Gpu, monitor: NvmlMonitor, steps: int = 20) -> tuple[list[str], dict]:
    with tempfile.TemporaryDirectory() as tmp:
        progress_file = Path(tmp) / "progress.jsonl"
        env = child_env(gpu.uuid or str(gpu.index))
        env.update({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "FRENZY_PLAN": json.dumps({"dp": 1, "micro_batch": 8}),
                    "FRENZY_PROGRESS_FILE": str(progress_file)})
        command = [sys.executable, "-m", "frenzy_trainer", "--model", "tiny-gpt2", "--seq-len", "256",
                   "--global-batch", "16", "--steps", str(steps), "--lr", "3e-3"]
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, cwd=tmp, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        nvml_max = 0
        while proc.poll() is None:
            nvml_max = max(nvml_max, monitor.read(gpu).memory_used_bytes)
            time.sleep(0.05)
        output = proc.stdout.read() if proc.stdout else ""
        lines = [json.loads(line) for line in progress_file.read_text().splitlines()] \
            if progress_file.exists() else []
    summary = {"exit_code": proc.returncode, "seconds": round(time.monotonic() - started, 1),
               "nvml_max_used_bytes": nvml_max, "progress_lines": len(lines),
               "first": lines[0] if lines else None, "done": lines[-1] if lines else None}
    print("training:", json.dumps(summary))
    failures = []
    if proc.returncode != 0:
        return [f"trainer exited {proc.returncode}: {output.strip()[-500:]}"], summary
    done, first = lines[-1], lines[0]
    if done.get("event") != "done" or done.get("device") != "cuda":
        failures.append(f"trainer's last line is not a CUDA done line: {done}")
    if not done["loss"] < first["loss"]:
        failures.append(f"loss did not fall: {first['loss']} -> {done['loss']}")
    if not 0 < done["peak_memory_bytes"] <= nvml_max:
        failures.append(f"measured peak {done['peak_memory_bytes']} not in (0, NVML max used {nvml_max}]")
    return failures, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", action="store_true", help="also run the reference trainer on GPU 0")
    parser.add_argument("--json", type=Path, help="write the inventory and results as JSON here")
    args = parser.parse_args()
    try:
        gpus = discover_nvml()
    except NvmlUnavailable as err:
        print(f"gpu_check: {err}", file=sys.stderr)
        return 2
    print(f"discovery: {len(gpus)} GPU(s) through NVML")
    show(gpus)
    failures = [f"GPU {g.index} unhealthy: {g.error}" for g in gpus if not g.healthy]
    if not gpus:
        failures.append("NVML found no GPUs")
    monitor = NvmlMonitor()
    readings = [monitor.read(g) for g in gpus]
    print("heartbeat readings:")
    show(readings)
    results: dict = {"inventory": [asdict(g) for g in gpus], "heartbeat": [asdict(g) for g in readings]}
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        failures += check_visibility(gpus)
        healthy = [g for g in gpus if g.healthy]
        if args.train and healthy:
            train_failures, results["training"] = check_training(healthy[0], monitor)
            failures += train_failures
    else:
        print("visibility/training: skipped (torch with CUDA not available)")
    monitor.close()
    results["failures"] = failures
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    for failure in failures:
        print(f"FAIL: {failure}")
    print("gpu_check: OK" if not failures else f"gpu_check: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
