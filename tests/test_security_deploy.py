"""The compose cluster's security wiring, checked against the code (no Docker engine here)."""
from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from frenzy.tools.cli_token import security

ROOT = Path(__file__).resolve().parents[1]
SERVICES = yaml.safe_load((ROOT / "deploy" / "compose" / "compose.yaml").read_text())["services"]


def test_only_the_orchestrator_writes_the_security_dir_and_agents_get_their_bootstrap_files():
    init = SERVICES["security-init"]
    assert init["restart"] == "no"
    for name, service in SERVICES.items():
        if name in ("kafka", "security-init"):
            continue
        mounts = service.get("volumes") or []
        env = service["environment"]
        assert service["depends_on"]["security-init"]["condition"] == "service_completed_successfully"
        security = [m for m in mounts if m.startswith("security:")]
        if name == "orchestrator":
            assert env["FRENZY_SECURITY_DIR"] == mounts[0].split(":")[1]
        elif name == "dashboard":
            # It checks the API's tokens read-only (docs/dashboard.md says what else that exposes).
            assert security and all(m.endswith(":ro") for m in security), security
        else:
            assert not security, name
        if service["command"][0] == "frenzy_agent":
            assert {"FRENZY_JOIN_TOKEN_FILE", "FRENZY_ORCHESTRATOR_KEY_FILE"} <= env.keys(), name
            bootstrap = [m for m in mounts if m.startswith("bootstrap:")]
            assert bootstrap and all(m.endswith(":ro") for m in bootstrap), name


def test_security_init_as_compose_runs_it_is_idempotent(tmp_path):
    args = [a.replace("/var/lib/frenzy", str(tmp_path)) for a in SERVICES["security-init"]["command"][3:]]
    first = CliRunner().invoke(security, ["init", *args])
    assert first.exit_code == 0, first.output
    token = (tmp_path / "bootstrap" / "join-token").read_text()
    admin = (tmp_path / "security" / "client.json").read_text()
    again = CliRunner().invoke(security, ["init", *args])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "bootstrap" / "join-token").read_text() == token
    assert (tmp_path / "security" / "client.json").read_text() == admin
    assert sorted(p.name for p in (tmp_path / "bootstrap").iterdir()) == ["join-token", "orchestrator.pub"]
