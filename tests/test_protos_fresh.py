"""Fails when frenzy/v1 is stale against protos/ (run `make proto`)."""
from pathlib import Path

from frenzy.tools.protogen import ROOT, generate


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    generate(tmp_path)
    generated = sorted(p.relative_to(tmp_path) for p in (tmp_path / "frenzy" / "v1").iterdir())
    assert generated, "protoc produced nothing"
    for rel in generated:
        checked_in = ROOT / rel
        assert checked_in.exists(), f"{rel} missing: run `make proto`"
        assert checked_in.read_bytes() == (tmp_path / rel).read_bytes(), f"{rel} is stale: run `make proto`"
