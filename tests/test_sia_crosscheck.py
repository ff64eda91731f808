"""bench/sia_crosscheck.py without Sia's code: it skips cleanly, and its round comparison counts
what it says (the cross-check itself needs the artifact; docs/has.md has its figures)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench/sia_crosscheck.py"


def load_crosscheck():
    spec = importlib.util.spec_from_file_location("sia_crosscheck", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sia_crosscheck"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_crosscheck_skips_with_a_clear_message_without_the_artifact(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--sia-dir", str(tmp_path / "absent"),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "skipped" in done.stdout and "siasosp23/artifacts" in done.stdout
    assert not out.exists()


def test_round_comparison_counts_same_allocations_and_fills_skipped_rounds() -> None:
    crosscheck = load_crosscheck()
    sia_rounds = [
        {"t": 60, "alloc": {"a": ["aws", 4, [4]], "b": ["dgx-ext", 8, [8]]}},
        {"t": 120, "alloc": {"a": ["aws", 4, [4]], "b": ["dgx-ext", 8, [8]]}},
        {"t": 180, "alloc": {"b": ["aws", 8, [4, 4]]}},
    ]
    # our engine called the policy at 60 only: 120 keeps its answer, 180 drops 'a' (ended 150)
    ours = [{"t": 60, "alloc": {"a": ["aws", 4], "b": ["dgx-ext", 8]}}]
    result = crosscheck.compare_rounds(sia_rounds, ours, {"a": 150.0, "b": 400.0}, first=10)
    assert result["rounds"] == 3 and result["pairs"] == 5 and result["same"] == 4
    assert result["same_gpus_per_type"] == 2 / 3
    assert result["first_differences"] == [
        {"t": 180, "job": "b", "sia": ["aws", 8], "ours": ["dgx-ext", 8]}]


def test_first_allocations_compare_ours_with_sias_choice_after_its_one_gpu_start() -> None:
    crosscheck = load_crosscheck()
    sia_rounds = [{"t": 60, "alloc": {"a": ["aws", 1, [1]], "b": ["dgx-ext", 8, [8]]}},
                  {"t": 120, "alloc": {"a": ["dgx-ext", 4, [4]], "b": ["aws", 8, [4, 4]]}}]
    ours = [{"t": 60, "alloc": {"a": ["dgx-ext", 4], "b": ["dgx-ext", 8]}}]
    result = crosscheck.first_allocations(sia_rounds, ours)
    # 'a' started on 1 GPU (Sia had not seen it run): its next allocation is the one compared;
    # 'b' did not, so its first is, and its later migration is not a first allocation
    assert result["sia_starts_on_1_gpu"] == 1
    assert result["same_as_sias_first"] == 1 and result["same_as_sias_informed"] == 2
    assert result["differ"] == {}
