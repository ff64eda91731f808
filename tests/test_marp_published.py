"""The published-measurement table (bench/data/marp_published.yaml) is well formed: every row names
its source, version, metric and grade, and a row not like for like says why (never dropped
silently: bench/marp_published.py counts it in its "all rows" figures)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from marp_published import DATA, LIKE_FOR_LIKE, check_grade, row_job  # noqa: E402

ROWS = yaml.safe_load(DATA.read_text())


def test_every_row_names_source_version_metric_and_grade():
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids)), "row ids repeat"
    for row in ROWS:
        assert row["source"].startswith("https://"), row["id"]
        assert row["version"] and row["metric"] in ("allocated", "reserved"), row["id"]
        assert row["measured_bytes"] > 0, row["id"]
        check_grade(row)


def test_like_for_like_rows_map_onto_a_job():
    for row in ROWS:
        if row["mapping"] in LIKE_FOR_LIKE:
            row_job(row)  # the model, plan and recipe the row's stack ran


def test_a_row_not_like_for_like_needs_its_reason():
    row = {"id": "x/y", "mapping": "unlike"}
    with pytest.raises(ValueError, match="grade_reason"):
        check_grade(row)
    check_grade({**row, "grade_reason": "no script"})
    with pytest.raises(ValueError, match="mapping"):
        check_grade({"id": "x/y", "mapping": "roughly"})


def test_hf_rows_keep_deepspeeds_zero_on_one_gpu():
    """The HF Trainer rows on one GPU ran DeepSpeed ZeRO-3 (fp16): its partitions, 16-bit gradient
    buffer and reduce bucket exist with a world size of 1, so the plan keeps zero 3 there, where
    other stacks' single-rank rows drop to zero 0."""
    hf = [r for r in ROWS if r["stack"] == "hf"]
    assert hf, "no HF Trainer rows"
    for row in hf:
        assert "/blob/" in row["source"] and row["source"].endswith(".csv"), row["id"]
        _, recipe, plan, _, accum = row_job(row)
        assert plan.zero == row["zero"] == 3 and recipe.precision == "fp16", row["id"]
        assert accum == 1, row["id"]
    one_gpu = [r for r in hf if r["dp"] == 1]
    assert one_gpu
    megatron_like = {**one_gpu[0], "id": "x/one-gpu", "stack": "torchtitan"}
    assert row_job(megatron_like)[2].zero == 0
