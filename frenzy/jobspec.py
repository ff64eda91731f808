"""The job spec at the edge: YAML <-> protobuf, and validation into domain types.

Every entry point (gRPC SubmitJob, the CLI, a pipeline's JSON on Kafka) goes through
`resolve_spec`, so a bad field gets the same message everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import json

from frenzy.catalog.models import ModelArch, from_hf_config, model_catalog
from frenzy.catalog.gpus import get_gpu
from frenzy.domain import MAX_SEQ_LEN, Constraints, Recipe, TrainingSpec
from frenzy.security.limits import MODEL_DIMENSION_LIMITS, LimitError, check_spec_limits
from frenzy.v1 import types_pb2


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
    framework: str = "frenzy"  # the training stack whose recipe MARP predicts (docs/marp-stacks.md)
    # Checkpoints (docs/trainer.md, "Checkpoint and resume"): every N steps and/or T seconds.
    checkpoint_every_steps: int = 0
    checkpoint_every_s: float = 0.0
    checkpoint_keep: int = 0         # committed checkpoints kept; 0 = the default
    checkpoint_uri: str = ""         # empty: a per-job directory under the agent's root
    keep_checkpoints: bool = False   # keep them after the job ends


class ConstraintsModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu_types: list[str] = Field(default_factory=list)
    max_gpus: int = 0
    min_gpus: int = 0
    deadline: float | None = None  # epoch seconds
    pinned: bool = False  # never resized, migrated or preempted by the scheduler


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
                grad_dtype=t.grad_dtype, attention=t.attention, dropout=t.dropout,
                framework=t.framework,
                checkpoint_every_steps=t.checkpoint_every_steps,
                checkpoint_every_s=t.checkpoint_every_s, checkpoint_keep=t.checkpoint_keep,
                checkpoint_uri=t.checkpoint_uri, keep_checkpoints=t.keep_checkpoints),
            constraints=types_pb2.Constraints(gpu_types=self.constraints.gpu_types,
                                              max_gpus=self.constraints.max_gpus,
                                              min_gpus=self.constraints.min_gpus,
                                              pinned=self.constraints.pinned))
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
    return spec_from_dict(data, Path(path).parent)


def spec_from_dict(data: dict, base_dir: Path = Path(".")) -> types_pb2.JobSpec:
    """A spec in the YAML's shape (a parsed file, or a dict from the SDK) -> JobSpec; SpecError
    names the first bad field. A model naming a local config.json is read here and sent inline,
    relative paths from the working directory or base_dir (the spec file's folder)."""
    try:
        spec = JobSpecModel.model_validate(data).to_proto()
    except ValidationError as err:
        first = err.errors()[0]
        raise SpecError(".".join(str(p) for p in first["loc"]) or "spec", first["msg"]) from None
    return inline_model_config(spec, base_dir)


def inline_model_config(spec: types_pb2.JobSpec, base_dir: Path = Path(".")) -> types_pb2.JobSpec:
    """Client side: when spec.model names a local config.json, send its text inline.

    Servers never open a path a client named (they would read their own disk, and the error
    would tell the client whether a file such as /etc/shadow exists). A relative path is tried
    from the working directory, then from base_dir (the spec file's folder).
    """
    if spec.model_config_json or not spec.model or spec.model in model_catalog():
        return spec
    candidates = [Path(spec.model), base_dir / spec.model]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        if spec.model.endswith(".json"):
            raise SpecError("model", f"config file {spec.model!r} does not exist")
        return spec  # an unknown catalog name: the server says which names it knows
    try:
        spec.model_config_json = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError("model", f"cannot read {spec.model}: {err}") from None
    spec.model = path.resolve().parent.name or path.stem
    return spec


def _resolve_model(spec: types_pb2.JobSpec) -> ModelArch:
    """The architecture from the catalog or from the inline config.json, never from a path."""
    if spec.model_config_json:
        try:
            config = json.loads(spec.model_config_json)
        except json.JSONDecodeError as err:
            raise SpecError("model_config_json", f"not valid JSON ({err.msg})") from None
        if not isinstance(config, dict):
            raise SpecError("model_config_json", "must be a JSON object")
        try:
            arch = from_hf_config(config, name=spec.model)
        except ValueError as err:
            raise SpecError("model_config_json", str(err)) from None
        except (TypeError, OverflowError) as err:  # e.g. "hidden_size": null or a list
            raise SpecError("model_config_json", f"a field has the wrong type: {err}") from None
        for field, limit in MODEL_DIMENSION_LIMITS.items():
            if getattr(arch, field) > limit:
                raise SpecError("model_config_json", f"{field} {getattr(arch, field)} exceeds the "
                                f"limit of {limit}")
        return arch
    catalog = model_catalog()
    if spec.model in catalog:
        return catalog[spec.model]
    if "/" in spec.model or spec.model.endswith(".json"):
        raise SpecError("model", "the server opens no paths: send the config.json inline as "
                        "model_config_json (the CLI and Python client do this for a local file)")
    raise SpecError("model", f"unknown model {spec.model!r}; catalog: {', '.join(catalog)}")


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
    try:
        check_spec_limits(spec)
    except LimitError as err:
        raise SpecError(err.field, str(err).removeprefix(f"{err.field}: ")) from None
    if not spec.name.strip():
        raise SpecError("name", "must not be empty")
    if not spec.model:
        raise SpecError("model", "must name a catalog model or a config.json path")
    arch = _resolve_model(spec)
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
    for name in ("checkpoint_every_steps", "checkpoint_every_s", "checkpoint_keep"):
        if getattr(t, name) < 0:
            raise SpecError(f"training.{name}", f"must not be negative, got {getattr(t, name)}")
    recipe = Recipe(precision=t.precision or "bf16", grad_dtype=t.grad_dtype or "fp32",
                    optimizer=t.optimizer or "adamw", attention=t.attention or "flash",
                    dropout=t.dropout, framework=t.framework or "frenzy")
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
