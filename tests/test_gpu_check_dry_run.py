"""`bench/gpu_check.py --plans` is what a session lent a GPU runs in its few minutes of device
time; a script broken since it was last run would spend them on a traceback. Its CPU dry run
drives the same plan loop (ranks, checkpoints, MARP beside each) on gloo, so it is checked here.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_checks_plan_loop_runs_on_cpu_with_checkpoints_and_marp_beside_each(tmp_path):
    out = tmp_path / "plans.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu-dry-run", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads(out.read_text())["plans"]
    # every one-GPU plan ran (the wider ones need more ranks than the dry run was given)
    assert [r["plan"] for r in rows] == ["dp1-z0-full", "dp1-z0-none", "dp1-z0-selective",
                                         "dp1-z0-none-mb8"]
    for row in rows:
        assert row["exit_codes"] == [0] and row["checkpoints"] == [3], row
        assert row["measured_peak_bytes"] > 0 and row["marp_peak_tensor_bytes"] > 0, row
        # no caching allocator on CPU: the trainer reports no reserved peak, nothing is judged
        assert row["measured_reserved_bytes"] == 0 and row["marp_reserved_error"] is None, row
        assert row["marp_peak_reserved_bytes"] >= row["marp_peak_tensor_bytes"], row
    by_plan = {r["plan"]: r for r in rows}
    # a larger micro-batch holds more activations, measured and predicted alike
    assert by_plan["dp1-z0-none-mb8"]["measured_peak_bytes"] > by_plan["dp1-z0-none"]["measured_peak_bytes"]
    assert by_plan["dp1-z0-none-mb8"]["marp_peak_tensor_bytes"] > by_plan["dp1-z0-none"]["marp_peak_tensor_bytes"]
