"""GPU check for a machine with an NVIDIA driver: the node agent's real NVML path, end to end.

    PYTHONPATH=.:services/node-agent python3 bench/gpu_check.py [--train] [--plans] [--json FILE]

Needs only nvidia-ml-py (and torch for checks 3-4), not the rest of Frenzy's dependencies.

1. discovery: `discover_nvml()` as the agent runs it without `--gpus`: each GPU's NVML name,
   catalog type, memory total / used, UUID and health;
2. heartbeat: one `NvmlMonitor` reading per GPU (what the agent's NodeHeartbeat carries);
3. visibility (torch with CUDA): a child process per GPU with CUDA_VISIBLE_DEVICES=<UUID>, as
   the agent launches a job, must see exactly that device (NVML's name and total memory);
4. --train: the reference trainer as one rank on GPU 0 (tiny-gpt2, 20 steps): it exits 0, the
   loss falls, and its measured peak (torch.cuda.max_memory_allocated) is > 0 and at most the
   most memory NVML saw in use on that GPU while it ran.
5. --plans: the reference trainer on nccl under each plan the GPUs allow (1 GPU: ZeRO-0,
   full recompute; 2+: DP2 ZeRO-1, DP2 ZeRO-3, TP2 with sequence parallelism, PP2 1F1B, TP2 x
   PP2 on 4), with a checkpoint every 3 steps: each exits 0 with a falling loss and a
   committed checkpoint, and its max_memory_allocated is printed beside MARP's
   peak_tensor_bytes for the same plan (the error is reported, not judged). Then the DP2 ZeRO-1
   checkpoint resumes under TP2 (DCP resharding on nccl) and must continue from step 3.

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
for path in (ROOT, ROOT / "services" / "node-agent", ROOT / "services" / "predictor"):
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
                                  str(ROOT / "services" / "predictor"), os.environ.get("PYTHONPATH", "")])
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


# (name, plan) for --plans; ranks = dp x tp x pp GPUs. The one-GPU plans come first and
# vary what MARP's terms vary on one device (recompute, micro-batch), so a one-GPU machine
# still checks MARP's allocated and reserved peaks at several points
PLAN_CHECKS = [
    ("dp1-z0-full", {"dp": 1, "zero": 0, "micro_batch": 4, "recompute": "full"}),
    ("dp1-z0-none", {"dp": 1, "zero": 0, "micro_batch": 4}),
    ("dp1-z0-selective", {"dp": 1, "zero": 0, "micro_batch": 4, "recompute": "selective"}),
    ("dp1-z0-none-mb8", {"dp": 1, "zero": 0, "micro_batch": 8}),
    ("dp2-z1", {"dp": 2, "zero": 1, "micro_batch": 4}),
    ("dp2-z3", {"dp": 2, "zero": 3, "micro_batch": 4}),
    ("tp2-sp", {"dp": 1, "tp": 2, "micro_batch": 4, "sequence_parallel": True}),
    ("pp2", {"dp": 1, "pp": 2, "micro_batch": 2}),
    ("tp2-pp2-sp", {"dp": 1, "tp": 2, "pp": 2, "micro_batch": 2, "sequence_parallel": True}),
]
PLAN_CHECKS_BY_NAME = dict(PLAN_CHECKS)
PLAN_MODEL, PLAN_SEQ_LEN, PLAN_BATCH, PLAN_STEPS = "gpt2", 512, 8, 6


def _run_ranks(gpus: list[Gpu], plan: dict, workdir: Path, args: list[str]) -> tuple[list[int], str]:
    from frenzy.ports import free_port

    ranks = plan.get("dp", 1) * plan.get("tp", 1) * plan.get("pp", 1)
    port = str(free_port())
    procs = []
    for rank in range(ranks):
        # --cpu-dry-run's simulated GPUs: no device visible, the trainer runs on gloo
        env = child_env("" if gpus[0].simulated else
                        ",".join(g.uuid or str(g.index) for g in gpus[:ranks]))
        env.update({"WORLD_SIZE": str(ranks), "RANK": str(rank), "LOCAL_RANK": str(rank),
                    "LOCAL_WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                    "FRENZY_PLAN": json.dumps(plan), "FRENZY_PROGRESS_FILE": str(workdir / "progress.jsonl"),
                    "FRENZY_DIST_TIMEOUT_S": "300"})
        procs.append(subprocess.Popen([sys.executable, "-m", "frenzy_trainer", *args], env=env, cwd=workdir,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    return [p.returncode for p in procs], "\n".join(o[-800:] for o in outputs)


def check_plans(gpus: list[Gpu], model: str = PLAN_MODEL, seq_len: int = PLAN_SEQ_LEN
                ) -> tuple[list[str], list[dict]]:
    from frenzy.catalog.models import load_model
    from frenzy.domain import ParallelPlan, Recipe
    from frenzy_predictor.memory import estimate_memory

    arch, failures, rows = load_model(model), [], []
    common = ["--model", model, "--seq-len", str(seq_len), "--global-batch", str(PLAN_BATCH),
              "--lr", "3e-4", "--checkpoint-every-steps", "3", "--keep-checkpoints"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, plan in PLAN_CHECKS:
            ranks = plan.get("dp", 1) * plan.get("tp", 1) * plan.get("pp", 1)
            if ranks > len(gpus):
                print(f"plan {name}: skipped (needs {ranks} GPUs, {len(gpus)} here)")
                continue
            workdir = Path(tmp) / name
            workdir.mkdir()
            codes, output = _run_ranks(gpus, plan, workdir, [*common, "--steps", str(PLAN_STEPS),
                                                             "--checkpoint-uri", str(workdir / "ckpt")])
            lines = [json.loads(l) for l in (workdir / "progress.jsonl").read_text().splitlines()] \
                if (workdir / "progress.jsonl").exists() else []
            steps = [l for l in lines if "event" not in l]
            full = ParallelPlan(**{"dp": 1, "tp": 1, "pp": 1, "zero": 0, "micro_batch": 1,
                                   "recompute": "none", "sequence_parallel": False, **plan})
            grad_accum = PLAN_BATCH // (full.dp * full.micro_batch)
            estimate = estimate_memory(arch, Recipe(), full, seq_len, grad_accum=grad_accum)
            predicted, predicted_reserved = estimate.peak_allocated_bytes, estimate.peak_reserved_bytes
            measured = lines[-1].get("peak_memory_bytes", 0) if lines else 0
            reserved = lines[-1].get("peak_reserved_bytes", 0) if lines else 0
            row = {"plan": name, "exit_codes": codes, "measured_peak_bytes": measured,
                   "marp_peak_tensor_bytes": predicted,
                   "marp_error": round((predicted - measured) / measured, 4) if measured else None,
                   "measured_reserved_bytes": reserved, "marp_peak_reserved_bytes": predicted_reserved,
                   "marp_reserved_error": round((predicted_reserved - reserved) / reserved, 4)
                   if reserved else None,
                   "checkpoints": [l["step"] for l in lines if l.get("event") == "checkpoint"]}
            rows.append(row)
            print(f"plan {name}: {json.dumps(row)}")
            if any(codes):
                failures.append(f"plan {name}: exit codes {codes}: {output[-600:]}")
            elif not (steps and steps[-1]["loss"] < steps[0]["loss"] and row["checkpoints"] == [3]):
                failures.append(f"plan {name}: loss {steps[0]['loss'] if steps else None} -> "
                                f"{steps[-1]['loss'] if steps else None}, checkpoints {row['checkpoints']}")
        source = Path(tmp) / "dp2-z1" / "ckpt"
        if source.is_dir() and len(gpus) >= 2:
            workdir = Path(tmp) / "reshard"
            workdir.mkdir()
            codes, output = _run_ranks(gpus, dict(PLAN_CHECKS_BY_NAME["tp2-sp"]), workdir,
                                       [*common, "--steps", str(PLAN_STEPS), "--checkpoint-uri", str(source)])
            lines = [json.loads(l) for l in (workdir / "progress.jsonl").read_text().splitlines()] \
                if (workdir / "progress.jsonl").exists() else []
            print(f"reshard dp2-z1 -> tp2-sp: exit {codes}, first line {lines[0] if lines else None}")
            if any(codes) or not lines or lines[0] != {"event": "resumed", "step": 3}:
                failures.append(f"reshard dp2-z1 -> tp2-sp: exit {codes}: {output[-600:]}")
    return failures, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", action="store_true", help="also run the reference trainer on GPU 0")
    parser.add_argument("--plans", action="store_true",
                        help="also run every plan the GPUs allow on nccl, with checkpoints, beside MARP")
    parser.add_argument("--json", type=Path, help="write the inventory and results as JSON here")
    parser.add_argument("--cpu-dry-run", type=int, default=0, metavar="RANKS",
                        help="no GPU: run --plans' plans that fit RANKS ranks on CPU (gloo), with "
                             "--dry-run-model, to check this script before a GPU session spends "
                             "device time on it (allocated is the CPU tracker's; reserved prints as null)")
    parser.add_argument("--dry-run-model", default="tiny-gpt2")
    parser.add_argument("--dry-run-seq-len", type=int, default=128)
    args = parser.parse_args()
    if args.cpu_dry_run:
        fake = [Gpu(index=i, gpu_type="cpu", memory_total_bytes=0, simulated=True, name="cpu")
                for i in range(args.cpu_dry_run)]
        failures, rows = check_plans(fake, args.dry_run_model, args.dry_run_seq_len)
        return report({"plans": rows}, failures, args.json, "gpu_check (CPU dry run)")
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
        if args.plans and healthy:
            plan_failures, results["plans"] = check_plans(healthy)
            failures += plan_failures
    else:
        print("visibility/training: skipped (torch with CUDA not available)")
    monitor.close()
    return report(results, failures, args.json)


def report(results: dict, failures: list[str], json_path: Path | None,
           name: str = "gpu_check") -> int:
    """Write the results (with the failures) as JSON if asked, print the failures and the
    verdict, and return the exit code."""
    results["failures"] = failures
    if json_path:
        json_path.write_text(json.dumps(results, indent=2))
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"{name}: OK" if not failures else f"{name}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
