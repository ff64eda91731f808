"""The compose cluster (deploy/compose/compose.yaml) cannot run here (no Docker engine), so this
checks what would break it: commands naming modules that do not exist, agent arguments the agent
rejects, services pointed at a broker address nobody advertises, duplicate node ids."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from frenzy.config import DashboardSettings, ErrorRecorderSettings, ServiceSettings
from frenzy_agent.gpus import parse_inventory
from frenzy_agent.service import arg_parser

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "deploy" / "compose" / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
FRENZY = {name: s for name, s in SERVICES.items() if name != "kafka"}


def test_every_frenzy_container_runs_an_existing_module_against_the_advertised_broker():
    advertised = SERVICES["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"].split("//")[1]
    assert {"orchestrator", "predictor", "scheduler", "errors"} <= FRENZY.keys()
    for name, service in FRENZY.items():
        module = service["command"][0]
        assert importlib.util.find_spec(module) is not None, f"{name}: no module {module}"
        assert service["environment"]["KAFKA_BOOTSTRAP"] == advertised, name
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy", name
        # Every FRENZY_* variable names a real setting (a typo would be silently ignored).
        known = {f"FRENZY_{field.upper()}" for settings in (ServiceSettings, ErrorRecorderSettings, DashboardSettings)
                 for field in settings.model_fields}
        unknown = {k for k in service["environment"] if k.startswith("FRENZY_")} - known
        assert not unknown, f"{name}: unknown settings {unknown}"


def test_agents_parse_and_are_reachable_by_their_service_name():
    agents = {name: s for name, s in FRENZY.items() if s["command"][0] == "frenzy_agent"}
    assert len(agents) >= 2
    node_ids = []
    for name, service in agents.items():
        args = arg_parser().parse_args(service["command"][1:])
        assert parse_inventory(args.gpus), name
        assert args.host == name, f"{name}: MASTER_ADDR must resolve to this container"
        node_ids.append(args.node_id)
    assert len(set(node_ids)) == len(node_ids)


def test_the_client_and_metrics_ports_are_published():
    orchestrator = SERVICES["orchestrator"]
    env = orchestrator["environment"]
    assert env["FRENZY_GRPC_HOST"] == "0.0.0.0"
    assert f"{env['FRENZY_GRPC_PORT']}:{env['FRENZY_GRPC_PORT']}" in orchestrator["ports"]
    assert f"{env['FRENZY_METRICS_PORT']}:{env['FRENZY_METRICS_PORT']}" in orchestrator["ports"]
