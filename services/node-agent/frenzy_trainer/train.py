"""`python -m frenzy_trainer`: the reference trainer a node agent launches, one process per GPU.

It reads the torchrun environment (WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), the plan MARP chose (FRENZY_PLAN) and the job (command-line flags, else FRENZY_*
variables, else FRENZY_JOB_SPEC JSON; docs/trainer.md), then trains the catalog model with the
reference recipe (frenzy_trainer.recipe):

* data parallel with ZeRO 0/1: Megatron-style flat fp32 grad buffer, one all-reduce per step
  (gloo on CPU, nccl on GPU);
* ZeRO 2/3: FSDP2 `fully_shard` with a MixedPrecisionPolicy;
* recompute none/selective/full: activation checkpointing in the model;
* tp > 1 or pp > 1: DTensor tensor (and sequence) parallelism, pipeline stages with 1F1B and
  FSDP2 data parallelism on one device mesh (frenzy_trainer.parallelize).

Exit codes: 0 done, 2 bad configuration, 3 out of memory (CUDA OOM, allocator OOM, or tracked
peak over FRENZY_MEMORY_LIMIT_BYTES), 4 the process group could not form (retryable), 143
SIGTERM, 1 anything else.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Mapping, Sequence

import torch
import torch.distributed as dist

from frenzy import jobvars
from frenzy.catalog.models import ModelArch, load_model
from frenzy.ports import free_port
from frenzy.domain import (ATTENTIONS, GRAD_DTYPES, MAX_SEQ_LEN, OPTIMIZERS, PRECISIONS,
                           ParallelPlan, Recipe)
from frenzy.outcomes import (EXIT_BAD_CONFIG, EXIT_FAILED, EXIT_OK, EXIT_OOM,
                             EXIT_RENDEZVOUS, EXIT_SIGTERM, OOM_REASON, PREEMPTED_REASON,
                             RENDEZVOUS_REASON, write_status)
from frenzy.runnable import runnable_plan

from . import checkpoint
from .checkpoint import DEFAULT_KEEP, Checkpointer, CheckpointPolicy
from .data import make_source, rank_micro_batches
from .progress import MemoryLimitExceeded, PeakMemory, ProgressWriter

SIGTERM_GRACE_S = 10.0  # after SIGTERM, cleanup gets this long before a hard exit


class ConfigError(ValueError):
    """Bad job configuration; the message names the field (exit code 2)."""


class Terminated(Exception):
    """SIGTERM arrived (exit code 143)."""


class RendezvousError(RuntimeError):
    """The process group could not form: the master port was taken, a peer was unreachable or
    late. Not the job's fault, so the orchestrator retries it on a fresh port (exit code 4)."""


@dataclass(frozen=True)
class JobConfig:
    model: str
    seq_len: int
    global_batch: int
    steps: int
    recipe: Recipe
    lr: float
    data: str
    seed: int
    log_every: int
    checkpoint: CheckpointPolicy = CheckpointPolicy("")


@dataclass(frozen=True)
class DistEnv:
    """The torchrun-compatible rendezvous environment."""

    world_size: int
    rank: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


# ---------------------------------------------------------------------------- configuration

# flag -> (FRENZY_* variable, FRENZY_JOB_SPEC key, default)
_FIELDS: dict[str, tuple[str, str, Any]] = {
    "model": (jobvars.MODEL, "model", None),
    "seq_len": (jobvars.SEQ_LEN, "seq_len", None),
    "global_batch": (jobvars.GLOBAL_BATCH, "global_batch_size", None),
    "steps": (jobvars.STEPS, "steps", None),
    "tokens": ("FRENZY_TOKENS", "tokens", None),
    "precision": (jobvars.PRECISION, "precision", "bf16"),
    "grad_dtype": (jobvars.GRAD_DTYPE, "grad_dtype", "fp32"),
    "optimizer": (jobvars.OPTIMIZER, "optimizer", "adamw"),
    "attention": (jobvars.ATTENTION, "attention", "flash"),
    "dropout": (jobvars.DROPOUT, "dropout", 0.0),
    "lr": ("FRENZY_LR", "lr", 6e-4),
    "data": ("FRENZY_DATA", "data", "synthetic"),
    "seed": ("FRENZY_SEED", "seed", 1234),
    "log_every": ("FRENZY_LOG_EVERY", "log_every", 1),
    "checkpoint_uri": (jobvars.CHECKPOINT_URI, "checkpoint_uri", ""),
    "checkpoint_every_steps": (jobvars.CHECKPOINT_EVERY_STEPS, "checkpoint_every_steps", 0),
    "checkpoint_every_s": (jobvars.CHECKPOINT_EVERY_S, "checkpoint_every_s", 0.0),
    "checkpoint_keep": (jobvars.CHECKPOINT_KEEP, "checkpoint_keep", DEFAULT_KEEP),
    "keep_checkpoints": (jobvars.KEEP_CHECKPOINTS, "keep_checkpoints", False),
    "checkpoint_async": ("FRENZY_CHECKPOINT_ASYNC", "checkpoint_async", True),
}


class _ArgParseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit 2 itself; keep control of the exit
        raise _ArgParseError(message)


def _arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m frenzy_trainer", description=__doc__.split("\n")[0])
    p.add_argument("--model", help="catalog name or path to a Hugging Face config.json")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--global-batch", type=int, help="sequences per optimizer step, all ranks")
    p.add_argument("--steps", type=int)
    p.add_argument("--tokens", type=float, help="training tokens (instead of --steps)")
    p.add_argument("--precision", choices=PRECISIONS)
    p.add_argument("--grad-dtype", choices=GRAD_DTYPES)
    p.add_argument("--optimizer", choices=OPTIMIZERS)
    p.add_argument("--attention", choices=ATTENTIONS)
    p.add_argument("--dropout", type=float)
    p.add_argument("--lr", type=float)
    p.add_argument("--data", help="'synthetic' or a path to a text file (byte-level tokens)")
    p.add_argument("--seed", type=int)
    p.add_argument("--log-every", type=int, help="progress line every N steps (default 1)")
    p.add_argument("--plan", help="plan JSON (default: FRENZY_PLAN; else a single-GPU plan)")
    p.add_argument("--checkpoint-uri", help="this job's checkpoint directory (none: no checkpoints)")
    p.add_argument("--checkpoint-every-steps", type=int)
    p.add_argument("--checkpoint-every-s", type=float)
    p.add_argument("--checkpoint-keep", type=int, help=f"committed checkpoints kept (default {DEFAULT_KEEP})")
    p.add_argument("--keep-checkpoints", action="store_const", const=True,
                   help="keep the checkpoints after the job finished")
    p.add_argument("--checkpoint-sync", dest="checkpoint_async", action="store_const", const=False,
                   help="save synchronously (default: dcp.async_save where torch has it)")
    return p


def _number(field: str, value: Any, kind: type) -> Any:
    try:
        number = kind(float(value)) if kind is int else kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{field}: {value!r} is not a valid {kind.__name__}") from None
    if kind is int and float(value) != number:
        raise ConfigError(f"{field}: {value!r} is not an integer")
    return number


def load_config(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[JobConfig, ParallelPlan]:
    """Flags win over FRENZY_* variables, which win over FRENZY_JOB_SPEC; ConfigError names the field."""
    try:
        args = vars(_arg_parser().parse_args(list(argv)))
    except _ArgParseError as err:
        raise ConfigError(f"arguments: {err}") from None
    spec: dict[str, Any] = {}
    if environ.get("FRENZY_JOB_SPEC"):
        try:
            spec = json.loads(environ["FRENZY_JOB_SPEC"])
        except json.JSONDecodeError as err:
            raise ConfigError(f"FRENZY_JOB_SPEC: not valid JSON ({err.msg})") from None
        if not isinstance(spec, dict):
            raise ConfigError("FRENZY_JOB_SPEC: must be a JSON object")
        spec = {**spec, **spec.get("training", {})}  # accept the JobSpec nesting too

    def value(field: str) -> Any:
        env_name, spec_key, default = _FIELDS[field]
        if args.get(field) is not None:
            return args[field]
        if environ.get(env_name, "") != "":
            return environ[env_name]
        if spec.get(spec_key) not in (None, "", 0) or isinstance(spec.get(spec_key), bool):
            return spec[spec_key]  # an explicit false too (checkpoint_async)
        return default

    model = value("model")
    if not model:
        raise ConfigError("model: missing (--model, FRENZY_MODEL or FRENZY_JOB_SPEC)")
    seq_len, global_batch = value("seq_len"), value("global_batch")
    for field, v in (("seq_len", seq_len), ("global_batch", global_batch)):
        if v is None:
            raise ConfigError(f"{field}: missing")
    seq_len, global_batch = _number("seq_len", seq_len, int), _number("global_batch", global_batch, int)
    if seq_len <= 0 or seq_len > MAX_SEQ_LEN:
        raise ConfigError(f"seq_len: must be in 1..{MAX_SEQ_LEN}, got {seq_len}")
    if global_batch <= 0:
        raise ConfigError(f"global_batch: must be positive, got {global_batch}")
    steps, tokens = value("steps"), value("tokens")
    if steps is not None:
        steps = _number("steps", steps, int)
    elif tokens is not None:
        steps = math.ceil(_number("tokens", tokens, float) / (seq_len * global_batch))
    else:
        raise ConfigError("steps: missing (--steps or --tokens)")
    if steps <= 0:
        raise ConfigError(f"steps: must be positive, got {steps}")
    recipe = Recipe(str(value("precision")), str(value("grad_dtype")), str(value("optimizer")),
                    str(value("attention")), _number("dropout", value("dropout"), float))
    try:
        recipe.validate()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    lr = _number("lr", value("lr"), float)
    if not lr > 0:
        raise ConfigError(f"lr: must be positive, got {lr}")
    log_every = _number("log_every", value("log_every"), int)
    config = JobConfig(str(model), seq_len, global_batch, steps, recipe, lr, str(value("data")),
                       _number("seed", value("seed"), int), max(1, log_every),
                       _checkpoint_policy(value))
    plan_text = args.get("plan") or environ.get(jobvars.PLAN) or ""
    return config, parse_plan(plan_text)


def _checkpoint_policy(value) -> CheckpointPolicy:
    every_steps = _number("checkpoint_every_steps", value("checkpoint_every_steps"), int)
    every_s = _number("checkpoint_every_s", value("checkpoint_every_s"), float)
    keep = _number("checkpoint_keep", value("checkpoint_keep"), int)
    for field, v in (("checkpoint_every_steps", every_steps), ("checkpoint_every_s", every_s),
                     ("checkpoint_keep", keep)):
        if v < 0:
            raise ConfigError(f"{field}: must not be negative, got {v}")
    keep_at_end = str(value("keep_checkpoints")).lower() in ("1", "true", "yes")
    asynchronous = str(value("checkpoint_async")).lower() not in ("0", "false", "no")
    return CheckpointPolicy(str(value("checkpoint_uri") or ""), every_steps, every_s,
                            keep or DEFAULT_KEEP, keep_at_end, asynchronous)


def parse_plan(text: str) -> ParallelPlan:
    """FRENZY_PLAN JSON -> ParallelPlan ({} or "" is one GPU, no parallelism)."""
    try:
        raw = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as err:
        raise ConfigError(f"FRENZY_PLAN: not valid JSON ({err.msg})") from None
    if not isinstance(raw, dict):
        raise ConfigError("FRENZY_PLAN: must be a JSON object")
    unknown = set(raw) - {"dp", "tp", "pp", "zero", "micro_batch", "recompute", "sequence_parallel"}
    if unknown:
        raise ConfigError(f"FRENZY_PLAN: unknown keys {sorted(unknown)}")
    ints = {k: _number(f"plan.{k}", raw.get(k, d), int)
            for k, d in (("dp", 1), ("tp", 1), ("pp", 1), ("zero", 0), ("micro_batch", 1))}
    plan = ParallelPlan(**ints, recompute=str(raw.get("recompute") or "none"),
                        sequence_parallel=bool(raw.get("sequence_parallel", False)))
    try:
        plan.validate()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return plan


def dist_env(environ: Mapping[str, str]) -> DistEnv:
    try:
        world = int(environ.get("WORLD_SIZE", "1"))
        rank = int(environ.get("RANK", "0"))
        local_rank = int(environ.get("LOCAL_RANK", str(rank)))
        local_world = int(environ.get("LOCAL_WORLD_SIZE", str(world)))
        port = int(environ.get("MASTER_PORT", "0") or 0)
    except ValueError as err:
        raise ConfigError(f"torchrun environment: {err}") from None
    if not 0 <= rank < world:
        raise ConfigError(f"RANK: {rank} is not in 0..WORLD_SIZE-1 ({world - 1})")
    return DistEnv(world, rank, local_rank, local_world, environ.get("MASTER_ADDR", "127.0.0.1"), port)


def check_plan(arch: ModelArch, config: JobConfig, plan: ParallelPlan, env: DistEnv) -> None:
    """The plan's limits are the ones MARP searches within (frenzy.runnable), so a plan MARP
    offered never fails here; the rest are this launch's own (positions, world size)."""
    reason = runnable_plan(arch, plan, seq_len=config.seq_len, global_batch=config.global_batch)
    if reason:
        raise ConfigError(reason)
    if arch.family == "gpt2" and config.seq_len > arch.max_position_embeddings:
        raise ConfigError(f"seq_len: {config.seq_len} exceeds {arch.name}'s learned positions "
                          f"({arch.max_position_embeddings})")
    if plan.num_gpus != env.world_size:
        raise ConfigError(f"plan: dp x tp x pp = {plan.num_gpus} but WORLD_SIZE = {env.world_size}")


# ---------------------------------------------------------------------------- training

def _device(env: DistEnv) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", env.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def _init_distributed(env: DistEnv, device: torch.device, plan: ParallelPlan,
                      timeout_s: float) -> None:
    """One process group over all ranks: always for more than one rank, and for FSDP2."""
    if env.world_size == 1 and plan.zero < 2:
        return
    os.environ.setdefault("MASTER_ADDR", env.master_addr)
    if env.master_port:
        os.environ["MASTER_PORT"] = str(env.master_port)
    elif env.world_size == 1:
        os.environ["MASTER_PORT"] = str(free_port())
    else:
        raise ConfigError("MASTER_PORT: missing for WORLD_SIZE > 1")
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        dist.init_process_group(backend, rank=env.rank, world_size=env.world_size,
                                timeout=timedelta(seconds=timeout_s),
                                device_id=device if device.type == "cuda" else None)
    except (RuntimeError, OSError) as err:  # DistNetworkError, DistStoreError, gloo connect
        if _is_oom(err):  # NCCL buffers that do not fit are the plan's problem, not the port's
            raise
        raise RendezvousError(f"{type(err).__name__} at {os.environ['MASTER_ADDR']}:"
                              f"{os.environ['MASTER_PORT']}: {err}") from err


def _build_trainer(arch: ModelArch, config: JobConfig, plan: ParallelPlan, device: torch.device):
    """tp = pp = 1: the flat-buffer (ZeRO-0/1) or FSDP2 (ZeRO-2/3) trainer MARP models;
    otherwise TP x PP x DP on a device mesh (frenzy_trainer.parallelize)."""
    if plan.tp > 1 or plan.pp > 1:
        from .parallelize import ParallelTrainer
        return ParallelTrainer(arch, config.recipe, plan, config.lr, device, config.seed)
    from .recipe import build_trainer

    mesh = None
    if plan.zero >= 2:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    return build_trainer(arch, config.recipe, zero=plan.zero, recompute=plan.recompute,
                         lr=config.lr, device=device, mesh=mesh)


def data_parallel_rank(rank: int, plan: ParallelPlan) -> int:
    """Ranks are laid out (pp, dp, tp), row-major, as the device mesh is."""
    return (rank // plan.tp) % plan.dp


def _reduce(loss: torch.Tensor, peaks: tuple[int, int], device: torch.device
            ) -> tuple[float, tuple[int, int]]:
    """Mean loss over data-parallel ranks and the largest per-rank peaks (allocated,
    reserved)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return float(loss), peaks
    mean = loss.float().to(device).reshape(1).clone()
    dist.all_reduce(mean)
    largest = torch.tensor([float(p) for p in peaks], device=device, dtype=torch.float64)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    return float(mean) / dist.get_world_size(), (int(largest[0]), int(largest[1]))


def train(config: JobConfig, plan: ParallelPlan, env: DistEnv, device: torch.device,
          progress: ProgressWriter, memory: PeakMemory, preempt: threading.Event) -> dict[str, Any]:
    """The training loop; returns the final summary (also written as the last progress line:
    "done", or "preempted" after a checkpoint-now request)."""
    arch = load_model(config.model)
    if device.type == "cuda" and config.recipe.precision == "bf16" and not torch.cuda.is_bf16_supported():
        config = replace(config, recipe=replace(config.recipe, precision="fp16"))  # as MARP assumes
    check_plan(arch, config, plan, env)
    source = make_source(config.data, arch.vocab_size, config.seq_len, config.seed)
    torch.manual_seed(config.seed)  # identical initial weights on every rank
    trainer = _build_trainer(arch, config, plan, device)
    checkpoints = Checkpointer(config.checkpoint, device)
    first = _resume(trainer, config.checkpoint.uri, device)
    memory.reset_peak()  # the peak of training, not of restoring
    if first:
        progress.write({"event": "resumed", "step": first})
    tokens_per_step = config.seq_len * config.global_batch
    started = time.monotonic()
    loss, peak, reserved, step, event = math.nan, 0, 0, first, "done"
    for step in range(first + 1, config.steps + 1):
        batches = rank_micro_batches(source, step, config.global_batch, plan.dp,
                                     data_parallel_rank(env.rank, plan), plan.micro_batch, device)
        step_loss = trainer.train_step(batches)
        memory.check()
        if step % config.log_every == 0 or step == config.steps:
            loss, (peak, reserved) = _reduce(
                step_loss, (memory.peak_bytes(), memory.peak_reserved_bytes()), device)
            progress.write({"step": step, "steps": config.steps, "tokens": step * tokens_per_step,
                            "loss": round(loss, 6), "peak_memory_bytes": peak,
                            **({"peak_reserved_bytes": reserved} if reserved else {}),
                            "time_s": round(time.monotonic() - started, 3)})
        save, stop = checkpoints.poll(step, preempt.is_set())
        stop = stop and step < config.steps  # the last step needs no checkpoint: the job is done
        commits = checkpoints.collect()  # an asynchronous save whose write has finished
        if save and step < config.steps:
            with memory.untracked():
                commits += checkpoints.save(trainer, step)
        if stop:  # checkpoint-now: the save counts only once committed, before the exit
            commits += checkpoints.collect(wait=True)
        _report_commits(progress, commits)
        if stop:
            event = "preempted"
            break
    _report_commits(progress, checkpoints.collect(wait=True))  # nothing in flight at exit
    if event == "done":
        checkpoints.finish()
    elapsed = time.monotonic() - started
    done = step - first
    return {"event": event, "step": step, "steps": config.steps,
            "tokens": step * tokens_per_step, "loss": round(loss, 6),
            "peak_memory_bytes": peak, **({"peak_reserved_bytes": reserved} if reserved else {}),
            "time_s": round(elapsed, 3),
            "tokens_per_s": round(done * tokens_per_step / max(elapsed, 1e-9), 1),
            "world_size": env.world_size, "device": device.type, "resumed_from_step": first,
            "checkpoint_step": checkpoint.latest_committed(config.checkpoint.uri)
            if config.checkpoint.uri else None}


def _report_commits(progress: ProgressWriter, commits: list[checkpoint.Commit]) -> None:
    for c in commits:
        progress.write({"event": "checkpoint", "step": c.step, "save_s": round(c.save_s, 4),
                        "write_s": round(c.write_s, 4)})


def _resume(trainer, uri: str, device: torch.device) -> int:
    """Load the newest committed checkpoint, if any; returns its step (0: a fresh start).
    Rank 0 picks the step and every rank loads it (a shared directory on more than one node)."""
    if not uri:
        return 0
    step = checkpoint.latest_committed(uri)
    if dist.is_initialized() and dist.get_world_size() > 1:
        chosen = torch.tensor([step], device=device)
        dist.broadcast(chosen, src=0)
        step = int(chosen.item())
    if step:
        checkpoint.load(trainer, uri, step)
    return step


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, (MemoryLimitExceeded, MemoryError)):
        return True
    if torch.cuda.is_available() and isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text.lower()
                                              or "DefaultCPUAllocator: can't allocate" in text)


def _on_sigterm(signum, frame) -> None:
    # A hard exit if cleanup hangs (e.g. peers stuck in a collective); the timer thread runs
    # even while the main thread waits in C++.
    timer = threading.Timer(SIGTERM_GRACE_S, lambda: os._exit(EXIT_SIGTERM))
    timer.daemon = True
    timer.start()
    raise Terminated()


def _shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - best effort while exiting
            pass


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run one rank; returns the exit code (see module docstring)."""
    environ = os.environ if environ is None else environ
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _on_sigterm)
    preempt = threading.Event()  # checkpoint-now: save at the next step boundary, then exit
    signal.signal(signal.SIGUSR1, lambda signum, frame: preempt.set())
    progress = ProgressWriter(None)
    try:
        config, plan = load_config(argv, environ)
        env = dist_env(environ)
        load_model(config.model)  # unknown model / model_type -> exit 2 before any rendezvous
        device = _device(env)
        if device.type == "cpu" and not environ.get("OMP_NUM_THREADS"):
            # Ranks of one node share its cores; oversubscribed OpenMP threads spin and crawl.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, env.local_world_size)))
        limit = int(environ.get("FRENZY_MEMORY_LIMIT_BYTES", "0") or 0)
        timeout_s = float(environ.get("FRENZY_DIST_TIMEOUT_S", "600"))
        _init_distributed(env, device, plan, timeout_s)
        progress = ProgressWriter(environ.get(jobvars.PROGRESS_FILE) if env.rank == 0 else None)
        with PeakMemory(device, limit) as memory:
            summary = train(config, plan, env, device, progress, memory, preempt)
        progress.write(summary)
        if dist.is_available() and dist.is_initialized():
            # Every rank reaches the end before any tears the group down: a rank that exits
            # while a peer's gloo work is still in flight aborts in C++ ("terminate called").
            dist.barrier()
        if summary["event"] == "preempted":
            # Every rank says so in its own status file (frenzy.outcomes), so no exit code a
            # user program could produce is read as a preemption; exit 0: the save succeeded.
            write_status(PREEMPTED_REASON, f"checkpoint at step {summary['checkpoint_step']}",
                         environ.get(jobvars.STATUS_FILE), summary["checkpoint_step"])
        return EXIT_OK
    except Terminated:
        print("frenzy_trainer: SIGTERM, stopping", file=sys.stderr)
        return EXIT_SIGTERM
    except RendezvousError as err:
        print(f"frenzy_trainer: rendezvous failed: {err}", file=sys.stderr)
        write_status(RENDEZVOUS_REASON, str(err), environ.get(jobvars.STATUS_FILE))
        return EXIT_RENDEZVOUS
    except (ConfigError, ValueError) as err:
        if _is_oom(err):
            print(f"frenzy_trainer: out of memory: {err}", file=sys.stderr)
            write_status(OOM_REASON, str(err), environ.get(jobvars.STATUS_FILE))
            return EXIT_OOM
        print(f"frenzy_trainer: bad configuration: {err}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    except SystemExit as err:  # --help
        return int(err.code or 0)
    except BaseException as err:  # noqa: BLE001 - every failure maps to an exit code
        if isinstance(err, KeyboardInterrupt):
            return EXIT_SIGTERM
        if _is_oom(err):
            print(f"frenzy_trainer: out of memory: {err}", file=sys.stderr)
            write_status(OOM_REASON, str(err), environ.get(jobvars.STATUS_FILE))
            return EXIT_OOM
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        progress.close()
        _shutdown()
