"""Plain dataclasses shared by the pure cores: training recipe, parallel plans, placement options.

Pydantic lives at the edges (job-spec YAML, settings); inside, everything is one of these.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PRECISIONS = ("bf16", "fp16", "fp32")
GRAD_DTYPES = ("fp32", "16bit")
OPTIMIZERS = ("adamw", "sgd")
# Optimizer state beyond the fp32 master weights, bytes per parameter: AdamW's two fp32 moments,
# SGD's one fp32 momentum buffer (ZeRO, Rajbhandari et al. 2020). MARP's memory terms and its
# step-time traffic both derive from it.
OPTIMIZER_MOMENT_BYTES = {"adamw": 8, "sgd": 4}
# The longest sequence any part accepts (job spec, MARP, the trainer): beyond it the s x s and
# logits terms stop being meaningful, and a longer one is almost surely a typo.
MAX_SEQ_LEN = 1 << 20
# A running job is reshaped (resized, migrated, preempted) at most once per this long: the
# orchestrator's guard (FRENZY_RESHAPE_MIN_INTERVAL_S) and has's hysteresis (HasConfig), one value
RESHAPE_MIN_INTERVAL_S = 600.0
# While jobs wait, the live scheduler asks its policy again at least this often with no event
# (FRENZY_SCHEDULER_REDECIDE_S; Sia's round); the simulator does the same (SimConfig.realistic)
SCHEDULER_REDECIDE_S = 60.0
ATTENTIONS = ("eager", "flash")
RECOMPUTES = ("none", "selective", "full")
# Training stacks MARP has a recipe profile for (services/predictor, frenzy_predictor.stacks);
# "frenzy" is the reference trainer.
FRAMEWORKS = ("frenzy", "megatron", "torchtitan", "deepspeed", "hf")


@dataclass(frozen=True)
class Recipe:
    """The training setup a memory prediction describes (see docs/recipe.md)."""

    precision: str = "bf16"
    grad_dtype: str = "fp32"
    optimizer: str = "adamw"
    attention: str = "flash"
    dropout: float = 0.0
    framework: str = "frenzy"  # whose recipe: which tensors the training stack keeps

    def validate(self) -> None:
        for name, value, allowed in (("framework", self.framework, FRAMEWORKS),
                                     ("precision", self.precision, PRECISIONS),
                                     ("grad_dtype", self.grad_dtype, GRAD_DTYPES),
                                     ("optimizer", self.optimizer, OPTIMIZERS),
                                     ("attention", self.attention, ATTENTIONS)):
            if value not in allowed:
                raise ValueError(f"training.{name}: {value!r} is not one of {allowed}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"training.dropout must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class TrainingSpec:
    seq_len: int
    global_batch_size: int
    total_tokens: int  # the step count, when the user gave steps, is converted to tokens
    recipe: Recipe = field(default_factory=Recipe)

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch_size

    @property
    def steps(self) -> int:
        return max(1, -(-self.total_tokens // self.tokens_per_step))


@dataclass(frozen=True)
class ParallelPlan:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0  # ZeRO stage 0-3; 3 means FSDP-style full sharding
    micro_batch: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    cp: int = 1  # context parallel: each sequence split over cp ranks (GPUs: dp x tp x pp x cp)
    ep: int = 1  # expert parallel: a MoE layer's experts split over ep of the dp ranks

    @property
    def num_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def validate(self) -> None:
        """ValueError naming the field; shared by MARP and the trainer, so both refuse alike."""
        for name in ("dp", "tp", "pp", "micro_batch", "cp", "ep"):
            if getattr(self, name) <= 0:
                raise ValueError(f"plan.{name}: must be positive, got {getattr(self, name)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"plan.zero: must be 0, 1, 2 or 3, got {self.zero}")
        if self.recompute not in RECOMPUTES:
            raise ValueError(f"plan.recompute: {self.recompute!r} is not one of {RECOMPUTES}")
        if self.dp % self.ep:
            raise ValueError(f"plan.ep: {self.ep} must divide plan.dp {self.dp} (experts are "
                             "spread over data-parallel ranks)")

    def grad_accum(self, global_batch_size: int) -> int:
        return global_batch_size // (self.dp * self.micro_batch)

    def describe(self) -> str:
        text = f"dp{self.dp}-tp{self.tp}-pp{self.pp}-z{self.zero}-mb{self.micro_batch}"
        text += (f"-cp{self.cp}" if self.cp > 1 else "") + (f"-ep{self.ep}" if self.ep > 1 else "")
        return text if self.recompute == "none" else f"{text}-rc:{self.recompute}"


@dataclass(frozen=True)
class PlanOption:
    """One way to run a job: a GPU type, a GPU count and a parallel plan, with MARP's estimates."""

    gpu_type: str
    plan: ParallelPlan
    peak_bytes_per_gpu: int  # the device peak, times memory_margin: what must fit
    step_time_s: float
    duration_s: float
    peak_allocated_bytes: int = 0  # compares with torch.cuda.max_memory_allocated (0: unknown)
    peak_reserved_bytes: int = 0  # compares with torch.cuda.max_memory_reserved (0: unknown)
    memory_margin: float = 1.0  # learned safety factor applied to the device peak (1.0: none)
    # The plan's GPU count, set once at construction: schedulers read it per option, per
    # decision. Not a cached property: caching in the instance's `__dict__` made one on first
    # read, and an instance with a dict answers every attribute read through it, about 2.4x
    # slower than through the inline values CPython 3.11 keeps for instances without one (the
    # has policy reads option fields some 20 M times on the first 10,000 Philly jobs)
    num_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_gpus", self.plan.num_gpus)

    @property
    def gpu_seconds(self) -> float:
        return self.duration_s * self.num_gpus


@dataclass(frozen=True)
class Constraints:
    gpu_types: tuple[str, ...] = ()  # empty: any
    max_gpus: int = 0  # 0: no limit
    deadline_s: float = 0.0  # absolute epoch seconds; 0: none
    min_gpus: int = 0  # 0: no floor
