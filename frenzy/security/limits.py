"""Input limits: every string, list and request a client sends has a bound, checked before use.

A bound exists because one oversized request used to end the cluster: a ~1 MiB SubmitJob was
accepted, the orchestrator's follow-up records (the job record repeats the spec) went past the
broker's 1 MiB record limit, and the orchestrator exited. Bounds here keep every record it
writes far below that limit.
"""
from __future__ import annotations

import re

from frenzy.v1 import types_pb2

MAX_REQUEST_BYTES = 256 * 1024  # a whole gRPC request; a spec is a few hundred bytes
MAX_RECORD_BYTES = 512 * 1024  # a whole Kafka record a consumer accepts (broker limit: 1 MiB)
MAX_NAME_CHARS = 256  # spec.name, spec.model, tenant names
MAX_MODEL_CONFIG_BYTES = 64 * 1024  # an inline config.json (Llama-3-70B's is 0.9 KiB)
MAX_ENTRYPOINT_ARGS = 64
MAX_ARG_CHARS = 4096
MAX_ENV_ENTRIES = 128
MAX_ENV_KEY_CHARS = 256
MAX_ENV_VALUE_CHARS = 8192
MAX_GPU_TYPES = 32
MAX_JOB_ID_CHARS = 128

# An inline config.json's sizes. The largest open models are far inside these (Llama-3.1-405B:
# hidden 16384, 126 layers, 128 heads, ffn 53248, vocab 128256); beyond them the memory model's
# products stop meaning anything, so such a config is refused rather than planned.
MODEL_DIMENSION_LIMITS = {"hidden_size": 1 << 17, "num_layers": 4096, "num_heads": 4096,
                          "num_kv_heads": 4096, "ffn_hidden_size": 1 << 20, "vocab_size": 1 << 23,
                          "max_position_embeddings": 1 << 24}

# Letters, digits, '.', '_', '-'; starts with a letter or digit. No '/', so no '..' component can
# form a path: a job id names a directory on every agent and a key on every topic.
JOB_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ENV_KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LimitError(ValueError):
    """An input over a limit; `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def job_id_problem(job_id: str) -> str:
    """Why a job id is unsafe, or "" when it is fine."""
    if len(job_id) > MAX_JOB_ID_CHARS:
        return f"longer than {MAX_JOB_ID_CHARS} characters"
    if not JOB_ID_PATTERN.fullmatch(job_id):
        return "must be letters, digits, '.', '_' or '-', starting with a letter or digit"
    return ""


def check_job_id(job_id: str, field: str = "job_id") -> None:
    problem = job_id_problem(job_id)
    if problem:
        raise LimitError(field, problem)


def _text(field: str, value: str, max_chars: int) -> None:
    if len(value) > max_chars:
        raise LimitError(field, f"{len(value)} characters exceeds the limit of {max_chars}")
    if "\x00" in value:
        raise LimitError(field, "must not contain NUL characters")


def check_spec_limits(spec: types_pb2.JobSpec) -> None:
    """Bounds on every free-form field of a job spec; LimitError names the first one over."""
    _text("name", spec.name, MAX_NAME_CHARS)
    _text("model", spec.model, MAX_NAME_CHARS)
    if len(spec.model_config_json.encode()) > MAX_MODEL_CONFIG_BYTES:
        raise LimitError("model_config_json", f"{len(spec.model_config_json.encode())} bytes "
                         f"exceeds the limit of {MAX_MODEL_CONFIG_BYTES}")
    if len(spec.entrypoint) > MAX_ENTRYPOINT_ARGS:
        raise LimitError("entrypoint", f"{len(spec.entrypoint)} arguments exceeds the limit of "
                         f"{MAX_ENTRYPOINT_ARGS}")
    for i, arg in enumerate(spec.entrypoint):
        _text(f"entrypoint[{i}]", arg, MAX_ARG_CHARS)
    if len(spec.env) > MAX_ENV_ENTRIES:
        raise LimitError("env", f"{len(spec.env)} entries exceeds the limit of {MAX_ENV_ENTRIES}")
    for key, value in spec.env.items():
        _text("env", key, MAX_ENV_KEY_CHARS)
        if not ENV_KEY_PATTERN.fullmatch(key):
            raise LimitError(f"env.{key[:40]}", "a variable name is letters, digits and '_'")
        _text(f"env.{key}", value, MAX_ENV_VALUE_CHARS)
    if len(spec.constraints.gpu_types) > MAX_GPU_TYPES:
        raise LimitError("constraints.gpu_types", f"{len(spec.constraints.gpu_types)} entries "
                         f"exceeds the limit of {MAX_GPU_TYPES}")
    for i, name in enumerate(spec.constraints.gpu_types):
        _text(f"constraints.gpu_types[{i}]", name, MAX_NAME_CHARS)
    for field in ("precision", "optimizer", "grad_dtype", "attention", "framework", "checkpoint_uri"):
        _text(f"training.{field}", getattr(spec.training, field), MAX_NAME_CHARS)
