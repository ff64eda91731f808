"""What a job process inherits from its agent: a clean environment, never the agent's own.

The agent's environment holds the broker address, its join token and the orchestrator's key;
a job that inherited them could forge records (it did: any job could reach the broker). A job
gets only these variables from the agent, then the torchrun variables and Frenzy's job
contract (`frenzy_agent.executor.job_environment`), then the spec's own `env`.
"""
from __future__ import annotations

import os

INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
             "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_HOME", "OMP_NUM_THREADS")
INHERITED_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "CUDA_")


def clean_environment(source: dict[str, str] | None = None) -> dict[str, str]:
    source = dict(os.environ if source is None else source)
    return {k: v for k, v in source.items()
            if k in INHERITED or (k.startswith(INHERITED_PREFIXES) and k != "CUDA_VISIBLE_DEVICES")}
