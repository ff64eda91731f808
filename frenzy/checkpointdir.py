"""A job's checkpoint directory: the layout the trainer writes (frenzy_trainer.checkpoint) and the
node agent removes when the job has ended (frenzy_agent.service), kept in one place.

    <dir>/step-000000040/            one checkpoint (DCP files)
    <dir>/step-000000040/COMMITTED   its commit marker
"""
from __future__ import annotations

import shutil
from pathlib import Path

STEP_PREFIX = "step-"
COMMIT_MARKER = "COMMITTED"


def step_dir(uri: str | Path, step: int) -> Path:
    return Path(uri) / f"{STEP_PREFIX}{step:09d}"


def step_of(path: Path) -> int | None:
    """The step a checkpoint directory's name holds; None for anything else."""
    name = path.name
    if not name.startswith(STEP_PREFIX) or not name[len(STEP_PREFIX):].isdigit():
        return None
    return int(name[len(STEP_PREFIX):])


def remove_checkpoints(directory: Path, owned: bool) -> list[Path]:
    """Remove a job's checkpoints; returns what was removed.

    `owned`: the directory was made for this job alone (the agent's per-job directory), so it
    goes whole. Otherwise it is one the spec named, which may hold other things: only the step
    directories go, then the directory itself if that left it empty. A symbolic link in place
    of the directory or of a step directory is never followed (rmtree unlinks links inside
    without following them), so nothing outside the job's checkpoint directory is touched.
    Idempotent: a missing directory is nothing to do.
    """
    if directory.is_symlink() or not directory.is_dir():
        return []
    if owned:
        shutil.rmtree(directory, ignore_errors=True)
        return [directory]
    removed = []
    for path in sorted(directory.iterdir()):
        if step_of(path) is not None and not path.is_symlink() and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    try:
        directory.rmdir()  # only if empty
        removed.append(directory)
    except OSError:
        pass
    return removed


def checkpoints_left(directory: Path, owned: bool) -> bool:
    """Whether `remove_checkpoints` left something it should have removed (it ignores errors
    such as a file it may not delete): the agent then does not acknowledge the delete."""
    if directory.is_symlink() or not directory.is_dir():
        return False
    if owned:
        return True
    return any(step_of(p) is not None and not p.is_symlink() and p.is_dir()
               for p in directory.iterdir())
