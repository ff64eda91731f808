"""The FRENZY_* variables a node agent gives each job process: the one place for their names.

The agent sets them (frenzy_agent.executor.job_environment); the reference trainer
(frenzy_trainer), the synthetic workload (frenzy_agent.workload) and the status-file writer
(frenzy.outcomes) read them. The trainer already depends on frenzy (catalog, domain, outcomes),
so it imports these too. Both sides import these names, so a renamed variable cannot leave
one side reading a variable nobody sets (tests/test_constants.py fails on a literal copy).
docs/trainer.md describes what each one holds. Variables only the trainer reads (FRENZY_LR,
FRENZY_SEED, ...; a spec's `env` may set them) stay with the trainer, their one reader.
"""
from __future__ import annotations

# The job and where it runs.
JOB_ID = "FRENZY_JOB_ID"
ATTEMPT = "FRENZY_ATTEMPT"
GPU_TYPE = "FRENZY_GPU_TYPE"
PLAN = "FRENZY_PLAN"  # JSON, frenzy.convert.plan_json

# The training setup (the job spec's `training`).
MODEL = "FRENZY_MODEL"  # a catalog name, or the path of the job's config.json
SEQ_LEN = "FRENZY_SEQ_LEN"
GLOBAL_BATCH = "FRENZY_GLOBAL_BATCH"
STEPS = "FRENZY_STEPS"
TOKENS_PER_STEP = "FRENZY_TOKENS_PER_STEP"
PRECISION = "FRENZY_PRECISION"
OPTIMIZER = "FRENZY_OPTIMIZER"
GRAD_DTYPE = "FRENZY_GRAD_DTYPE"
ATTENTION = "FRENZY_ATTENTION"
DROPOUT = "FRENZY_DROPOUT"

# MARP's prediction, which the synthetic workload plays out.
PREDICTED_DURATION_S = "FRENZY_PREDICTED_DURATION_S"
PREDICTED_PEAK_BYTES = "FRENZY_PREDICTED_PEAK_BYTES"
TIME_SCALE = "FRENZY_TIME_SCALE"

# Files the job writes and the agent reads.
PROGRESS_FILE = "FRENZY_PROGRESS_FILE"  # JSON lines, rank 0
STATUS_FILE = "FRENZY_STATUS_FILE"  # frenzy.outcomes, one per rank
EXIT_FILE = "FRENZY_EXIT_FILE"  # the exit code, written by the agent's shell wrapper

# Checkpoints (docs/trainer.md, "Checkpoints").
CHECKPOINT_URI = "FRENZY_CHECKPOINT_URI"
RESUME_FROM_STEP = "FRENZY_RESUME_FROM_STEP"
CHECKPOINT_EVERY_STEPS = "FRENZY_CHECKPOINT_EVERY_STEPS"
CHECKPOINT_EVERY_S = "FRENZY_CHECKPOINT_EVERY_S"
CHECKPOINT_KEEP = "FRENZY_CHECKPOINT_KEEP"
KEEP_CHECKPOINTS = "FRENZY_KEEP_CHECKPOINTS"


def names() -> dict[str, str]:
    """Every variable above, constant name -> variable name."""
    return {k: v for k, v in globals().items() if k.isupper() and isinstance(v, str)
            and v.startswith("FRENZY_")}
