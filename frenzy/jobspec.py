"""The job spec at the edge: YAML <-> protobuf, and validation into domain types.

Every entry point (gRPC SubmitJob, the CLI, a pipeline's JSON on Kafka) goes through
`resolve_spec`, so a bad field gets the same message everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from frenzy.catalog.models import ModelArch, load_model
from frenzy.catalog.gpus import get_gpu
from frenzy.domain import Constraints, Recipe, TrainingSpec
from frenzy.v1 import types_pb2

MAX_SEQ_LEN = 1_048_576


class SpecError(ValueError):
    """An invalid job spec; `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TrainingModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seq_len: int
    global_batch_size: int
    tokens: int | None = None
    steps: int | None = None
    precision: str = "bf16"
    optimizer: str = "adamw"
    grad_dtype: str = "fp32"
    attention: str = "flash"
    dropout: float = 0.0


class ConstraintsModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu_types: list[str] = Field(default_factory=list)
    max_gpus: int = 0
    min_gpus: int = 0
    deadline: float | None = None  # epoch seconds


class JobSpecModel(BaseModel):
    """The YAML a user writes (see examples/jobs/*.yaml)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    model: str
    training: TrainingModel
    constraints: ConstraintsModel = Field(default_factory=ConstraintsModel)
    entrypoint: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _split_command(cls, value: object) -> object:
        return value.split() if isinstance(value, str) else value

    def to_proto(self) -> types_pb2.JobSpec:
        t = self.training
        spec = types_pb2.JobSpec(
            name=self.name, model=self.model, entrypoint=self.entrypoint, env=self.env,
            training=types_pb2.TrainingConfig(
                seq_len=t.seq_len, global_batch_size=t.global_batch_size, tokens=t.tokens or 0,
                steps=t.steps or 0, precision=t.precision, optimizer=t.optimizer,
                grad_dtype=t.grad_dtype, attention=t.attention, dropout=t.dropout),
            constraints=types_pb2.Constraints(gpu_types=self.constraints.gpu_types,
                                              max_gpus=self.constraints.max_gpus,
                                              min_gpus=self.constraints.min_gpus))
        if self.constraints.deadline:
            spec.constraints.deadline.FromNanoseconds(int(self.constraints.deadline * 1e9))
        return spec


def load_spec_file(path: str | Path) -> types_pb2.JobSpec:
    """Read a YAML job spec; SpecError names the bad field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise SpecError("file", f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise SpecError("file", f"{path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise SpecError("file", f"{path} must hold a mapping")
    return spec_from_dict(data)


def spec_from_dict(data: dict) -> types_pb2.JobSpec:
    """A spec in the YAML's shape (a parsed file, or a dict from the SDK) -> JobSpec; SpecError
    names the first bad field."""
    try:
        return JobSpecModel.model_validate(data).to_proto()
    except ValidationError as err:
        first = err.errors()[0]
        raise SpecError(".".join(str(p) for p in first["loc"]) or "spec", first["msg"]) from None


@dataclass(frozen=True)
class ResolvedJob:
    """A validated spec in domain types: what the predictor and scheduler work from."""

    arch: ModelArch
    training: TrainingSpec
    constraints: Constraints


def _positive(field: str, value: int) -> None:
    if value <= 0:
        raise SpecError(field, f"must be positive, got {value}")


def resolve_spec(spec: types_pb2.JobSpec) -> ResolvedJob:
    """Validate a protobuf spec; raises SpecError naming the first bad field."""
    if not spec.name.strip():
        raise SpecError("name", "must not be empty")
    if not spec.model:
        raise SpecError("model", "must name a catalog model or a config.json path")
    try:
        arch = load_model(spec.model)
    except ValueError as err:
        raise SpecError("model", str(err).removeprefix("model: ")) from None
    t = spec.training
    _positive("training.seq_len", t.seq_len)
    _positive("training.global_batch_size", t.global_batch_size)
    if t.seq_len > MAX_SEQ_LEN:
        raise SpecError("training.seq_len", f"{t.seq_len} exceeds the limit of {MAX_SEQ_LEN}")
    if arch.family == "gpt2" and t.seq_len > arch.max_position_embeddings:
        raise SpecError("training.seq_len", f"{t.seq_len} exceeds {arch.name}'s "
                        f"{arch.max_position_embeddings} learned positions")
    if t.tokens < 0 or t.steps < 0:
        raise SpecError("training.tokens" if t.tokens < 0 else "training.steps", "must not be negative")
    if bool(t.tokens) == bool(t.steps):
        raise SpecError("training.tokens", "give exactly one of training.tokens or training.steps")
    total_tokens = t.tokens or t.steps * t.seq_len * t.global_batch_size
    recipe = Recipe(precision=t.precision or "bf16", grad_dtype=t.grad_dtype or "fp32",
                    optimizer=t.optimizer or "adamw", attention=t.attention or "flash",
                    dropout=t.dropout)
    try:
        recipe.validate()
    except ValueError as err:
        field, _, message = str(err).partition(": ")
        raise SpecError(field if field.startswith("training.") else "training", message or str(err)) from None
    c = spec.constraints
    for i, name in enumerate(c.gpu_types):
        try:
            get_gpu(name)
        except KeyError as err:
            raise SpecError(f"constraints.gpu_types[{i}]", err.args[0]) from None
    if c.max_gpus < 0:
        raise SpecError("constraints.max_gpus", f"must not be negative, got {c.max_gpus}")
    if c.min_gpus < 0:
        raise SpecError("constraints.min_gpus", f"must not be negative, got {c.min_gpus}")
    if c.max_gpus and c.min_gpus > c.max_gpus:
        raise SpecError("constraints.min_gpus", f"{c.min_gpus} is above max_gpus {c.max_gpus}")
    deadline_s = c.deadline.ToNanoseconds() / 1e9 if c.HasField("deadline") else 0.0
    return ResolvedJob(
        arch=arch,
        training=TrainingSpec(t.seq_len, t.global_batch_size, total_tokens, recipe),
        constraints=Constraints(tuple(get_gpu(n).name for n in c.gpu_types), c.max_gpus, deadline_s,
                                c.min_gpus))
