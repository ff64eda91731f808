"""The Kubernetes manifests (deploy/k8s), rendered with `kubectl kustomize` and checked offline:
against the Kubernetes API schemas (kubernetes-validate, strict: unknown fields fail), and against
the code, as tests/test_deploy_compose.py does for compose: the modules the containers run, the
agent's arguments, the FRENZY_* settings names, probe and Service ports, the broker address."""
from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from frenzy.config import DashboardSettings, ErrorRecorderSettings, ServiceSettings
from frenzy.v1 import services_pb2
from frenzy_agent.service import arg_parser
from frenzy_dashboard.auth import StaticTokens

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.32.0"
KUSTOMIZATIONS = ["base", "kafka", "overlays/dev", "overlays/production"]
WITH_FRENZY = ["base", "overlays/dev", "overlays/production"]  # "kafka" holds only the broker
# The settings class each module reads (a FRENZY_* variable it does not know is silently ignored).
SETTINGS = {"frenzy_orchestrator": ServiceSettings, "frenzy_predictor": ServiceSettings,
            "frenzy_scheduler": ServiceSettings, "frenzy_agent": ServiceSettings,
            "frenzy_predictor.error_recorder": ErrorRecorderSettings,
            "frenzy_dashboard": DashboardSettings}
CUSTOM_KINDS = {"ServiceMonitor", "Kafka", "KafkaNodePool"}  # CRDs: checked by hand below
KUBECTL = shutil.which("kubectl")

if KUBECTL is None:
    pytest.skip("no kubectl (Debian's kubernetes-client; .ci/run installs it) to render the "
                "kustomizations", allow_module_level=True)
# The kustomizations use the syntax both kustomize v2 (Debian's kubectl 1.20) and v5 render.
kubernetes_validate = pytest.importorskip("kubernetes_validate")


def render(kustomization: str) -> list[dict]:
    out = subprocess.run([KUBECTL, "kustomize", str(K8S / kustomization)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


RENDERED = {name: render(name) for name in KUSTOMIZATIONS}


def of_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def workloads(docs: list[dict]) -> dict[str, dict]:
    return {**of_kind(docs, "Deployment"), **of_kind(docs, "DaemonSet"), **of_kind(docs, "StatefulSet")}


def frenzy_containers(docs: list[dict]):
    for name, w in workloads(docs).items():
        for c in w["spec"]["template"]["spec"]["containers"]:
            if "frenzy" in c["image"]:
                yield name, w, c


def container_env(docs: list[dict], container: dict) -> dict[str, str]:
    """The container's environment: its ConfigMaps' data, then its own env values."""
    env: dict[str, str] = {}
    maps = of_kind(docs, "ConfigMap")
    for source in container.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]]["data"])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", f"<{item['name']}>")
    return env


def named_ports(container: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_manifest_matches_the_kubernetes_schema(kustomization):
    core = [d for d in RENDERED[kustomization] if d["kind"] not in CUSTOM_KINDS]
    assert len(core) >= 2
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_can_fail():
    broken = copy.deepcopy(of_kind(RENDERED["base"], "Deployment")["orchestrator"])
    broken["spec"]["replicas"] = "one"
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpcc"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kustomization", WITH_FRENZY)
def test_containers_run_real_modules_with_settings_the_code_knows(kustomization):
    docs = RENDERED[kustomization]
    modules = set()
    for name, _, c in frenzy_containers(docs):
        module = c["args"][0]
        modules.add(module)
        assert importlib.util.find_spec(module) is not None, f"{name}: no module {module}"
        known = {f"FRENZY_{field.upper()}" for field in SETTINGS[module].model_fields}
        unknown = {k for k in container_env(docs, c) if k.startswith("FRENZY_")} - known
        assert not unknown, f"{name}: settings {unknown} are not fields of {SETTINGS[module].__name__}"
    assert modules == set(SETTINGS)


@pytest.mark.parametrize("kustomization", WITH_FRENZY)
def test_probes_ask_the_ports_the_services_listen_on(kustomization):
    docs = RENDERED[kustomization]
    grpc_services = {s.full_name for s in services_pb2.DESCRIPTOR.services_by_name.values()}
    for name, _, c in frenzy_containers(docs):
        env, ports = container_env(docs, c), named_ports(c)
        listening = {int(env[k]) for k in ("FRENZY_GRPC_PORT", "FRENZY_HEALTH_PORT",
                                           "FRENZY_DASHBOARD_PORT", "FRENZY_ERRORS_WEB_PORT") if k in env}
        assert set(ports.values()) <= listening | {int(env.get("FRENZY_METRICS_PORT", 0))}, name
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = c.get(kind)
            if probe is None:
                assert kind == "startupProbe", f"{name} has no {kind}"
                continue
            if "grpc" in probe:
                assert probe["grpc"]["port"] == int(env["FRENZY_GRPC_PORT"]), name
                assert probe["grpc"].get("service", "") in grpc_services | {""}, name
                assert env["FRENZY_GRPC_HOST"] == "0.0.0.0", name
            else:
                action = probe.get("httpGet") or probe.get("tcpSocket")
                assert action["port"] in ports, f"{name}: {kind} asks port {action['port']}"
        if "FRENZY_DASHBOARD_PORT" in env:
            assert env["FRENZY_DASHBOARD_HOST"] == "0.0.0.0"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_services_and_service_monitors_reach_named_container_ports(kustomization):
    docs = RENDERED[kustomization]
    pods = {name: w["spec"]["template"] for name, w in workloads(docs).items()}
    services = of_kind(docs, "Service")
    for sname, svc in services.items():
        selected = [t for t in pods.values()
                    if svc["spec"]["selector"].items() <= t["metadata"]["labels"].items()]
        assert selected, f"Service {sname} selects no pods"
        ports = {p for t in selected for c in t["spec"]["containers"] for p in named_ports(c)}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports, f"Service {sname}: no container port {port['targetPort']}"
    for mname, monitor in of_kind(docs, "ServiceMonitor").items():
        wanted = monitor["spec"]["selector"]["matchLabels"].items()
        matched = [s for s in services.values() if wanted <= s["metadata"].get("labels", {}).items()]
        assert matched, f"ServiceMonitor {mname} selects no Service"
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in {p["name"] for s in matched for p in s["spec"]["ports"]}


@pytest.mark.parametrize("kustomization", WITH_FRENZY)
def test_agents_parse_and_run_on_gpu_nodes_on_the_host_network(kustomization):
    docs = RENDERED[kustomization]
    agent = of_kind(docs, "DaemonSet")["agent"]
    spec = agent["spec"]["template"]["spec"]
    container = spec["containers"][0]
    args = [re.sub(r"\$\((\w+)\)", lambda m: f"<{m.group(1)}>", a) for a in container["args"][1:]]
    parsed = arg_parser().parse_args(args)
    assert parsed.node_id == "<NODE_NAME>" and parsed.host == "<NODE_IP>"
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    fields = {e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert fields == {"spec.nodeName", "status.hostIP"}
    if kustomization == "overlays/dev":
        assert parsed.gpus and "nodeSelector" not in spec  # simulated inventory anywhere
    else:
        assert not parsed.gpus, "real nodes discover their GPUs through NVML"
        assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
        assert "nvidia.com/gpu.present" in spec["nodeSelector"]


def test_every_service_reaches_the_broker_that_is_deployed():
    dev = RENDERED["overlays/dev"]
    kafka = of_kind(dev, "StatefulSet")["kafka"]["spec"]["template"]["spec"]["containers"][0]
    advertised = {e["name"]: e["value"] for e in kafka["env"]}["KAFKA_ADVERTISED_LISTENERS"]
    assert of_kind(dev, "ConfigMap")["frenzy-config"]["data"]["KAFKA_BOOTSTRAP"] == advertised.split("//")[1]

    production = RENDERED["overlays/production"]
    assert "kafka" not in of_kind(production, "StatefulSet")
    strimzi = of_kind(production, "Kafka")["frenzy"]
    assert strimzi["metadata"]["annotations"]["strimzi.io/kraft"] == "enabled"
    (plain,) = [li for li in strimzi["spec"]["kafka"]["listeners"] if not li["tls"]]
    bootstrap = f"{strimzi['metadata']['name']}-kafka-bootstrap:{plain['port']}"
    config = of_kind(production, "ConfigMap")["frenzy-config"]["data"]
    assert config["KAFKA_BOOTSTRAP"] == bootstrap
    (pool,) = of_kind(production, "KafkaNodePool").values()
    assert pool["metadata"]["labels"]["strimzi.io/cluster"] == "frenzy"
    assert set(pool["spec"]["roles"]) == {"controller", "broker"}
    assert int(config["FRENZY_REPLICATION_FACTOR"]) <= pool["spec"]["replicas"]


def test_the_dashboard_reads_its_tokens_from_a_secret_that_parses():
    for kustomization in ("overlays/dev", "overlays/production"):
        docs = RENDERED[kustomization]
        dashboard = of_kind(docs, "Deployment")["dashboard"]["spec"]["template"]["spec"]
        (volume,) = [v for v in dashboard["volumes"] if "secret" in v]
        secret_name = volume["secret"]["secretName"]
        mount = next(m for m in dashboard["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
        tokens_file = container_env(docs, dashboard["containers"][0])["FRENZY_DASHBOARD_TOKENS_FILE"]
        assert tokens_file.startswith(mount["mountPath"] + "/")
        if kustomization == "overlays/dev":  # generated from dev-tokens.json; production's is made by hand
            assert secret_name in of_kind(docs, "Secret")
            tokens = StaticTokens.from_file(K8S / "overlays" / "dev" / "dev-tokens.json")
            assert tokens.authenticate("dev-team-a-token").tenant == "team-a"
    ingress = of_kind(RENDERED["overlays/production"], "Ingress")["dashboard"]
    assert ingress["spec"]["tls"] and ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"][
        "service"]["name"] == "dashboard"
