"""Saving a benchmark's result: every bench script writes one JSON file under bench/results/."""
from __future__ import annotations

import json
from pathlib import Path


def save_result(result: dict, out: str | Path) -> None:
    """Write `result` as indented JSON to `out` (folders made as needed) and say where."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"saved {path}")
