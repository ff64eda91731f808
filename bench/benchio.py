"""Saving a benchmark's result (every bench script writes one JSON file under bench/results/),
and running a child process on another checkout's code (the paired before/after benchmarks)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SERVICES = ("scheduler", "predictor", "orchestrator", "node-agent")  # each a package folder
OTHER_CHECKOUT = "FRENZY_BENCH_OTHER_CHECKOUT"  # set in a child that runs another checkout


def save_result(result: dict, out: str | Path) -> None:
    """Write `result` as indented JSON to `out` (folders made as needed) and say where."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"saved {path}")


def other_checkout_env(root: Path) -> dict[str, str]:
    """The environment of a child process that runs another checkout's packages, `frenzy`
    included, from its own tree (a worktree with its own compiled build); the child calls
    `use_other_checkout` first thing."""
    packages = [root / "services" / s for s in SERVICES] + [root]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, packages)),
                **{OTHER_CHECKOUT: "1"})


def use_other_checkout() -> None:
    """In a child started with `other_checkout_env`: drop the editable install's import
    finder, which would otherwise serve every package from this checkout whatever
    PYTHONPATH says."""
    if os.environ.get(OTHER_CHECKOUT):
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
