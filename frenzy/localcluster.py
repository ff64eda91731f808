"""`frenzy up`: the whole system on one machine, each service its own OS process with its own log."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from frenzy.broker import EmbeddedBroker, free_port, start_embedded_broker, wait_for_port
from frenzy.topics import namespace_prefix

DEFAULT_CLUSTER = Path(__file__).resolve().parent.parent / "deploy" / "clusters" / "local.yaml"


@dataclass
class LocalCluster:
    """Processes of one local Frenzy cluster; stop() ends them all, job processes included."""

    workdir: Path
    grpc_port: int
    bootstrap: str = ""
    broker: EmbeddedBroker | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    commands: dict[str, tuple[list[str], dict[str, str] | None]] = field(default_factory=dict)
    node_ids: list[str] = field(default_factory=list)
    metrics_port: int = 0
    errors_port: int = 0  # the predictor's memory-error record (faust web view)
    namespace: str = ""  # topic and consumer-group prefix (FRENZY_NAMESPACE)
    dashboard_port: int = 0
    dashboard_ticket: str = ""  # one-time admin login token of the dashboard

    @property
    def dashboard_link(self) -> str:
        """The login link, as Jupyter prints one: the token opens a session once."""
        return f"http://127.0.0.1:{self.dashboard_port}/login?token={self.dashboard_ticket}"

    def topic_name(self, topic) -> str:
        return namespace_prefix(self.namespace) + topic.name

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "KAFKA_BOOTSTRAP": self.bootstrap, "FRENZY_GRPC_PORT": str(self.grpc_port),
                "PYTHONUNBUFFERED": "1", **(extra or {})}

    def spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        log_dir = self.workdir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env(extra_env),
                                    start_new_session=True)
        self.processes[name] = proc
        self.commands[name] = (args, extra_env)
        return proc

    def restart(self, name: str) -> subprocess.Popen:
        """Start a stopped (or killed) process again with its original command."""
        self.stop_process(name)
        args, extra_env = self.commands[name]
        return self.spawn(name, args, extra_env)

    def stop_process(self, name: str, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        proc = self.processes.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.stop_process(name)
        _kill_job_processes(self.workdir / "agents")
        if self.broker is not None:
            self.broker.stop()

    def dead(self) -> list[str]:
        return [name for name, p in self.processes.items() if p.poll() is not None]


def _kill_job_processes(agents_dir: Path) -> None:
    """Job process groups deliberately survive their agent; at cluster shutdown they go too."""
    import json

    for state in agents_dir.glob("*/*/state.json"):
        try:
            os.killpg(json.loads(state.read_text())["pgid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def agent_args(node_id: str, gpu_type: str, gpus: int, workdir: Path) -> list[str]:
    return ["frenzy_agent", "--node-id", node_id, "--gpus", f"{gpus}x{gpu_type}",
            "--state-dir", str(workdir / "agents")]


def start_cluster(cluster_file: Path = DEFAULT_CLUSTER, grpc_port: int = 50051,
                  workdir: Path = Path(".frenzy"), policy: str = "has",
                  extra_env: dict[str, str] | None = None, timeout_s: float = 60.0,
                  namespace: str = "") -> LocalCluster:
    """Start broker (unless KAFKA_BOOTSTRAP is set), predictor, scheduler, orchestrator, the
    predictor's memory-error recorder, the dashboard, agents."""
    from frenzy_scheduler.clusterfile import build_cluster, load_cluster_file

    groups = load_cluster_file(cluster_file)
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(workdir, grpc_port, namespace=namespace)
    try:
        if os.environ.get("KAFKA_BOOTSTRAP"):
            cluster.bootstrap = os.environ["KAFKA_BOOTSTRAP"]
        else:
            (workdir / "logs").mkdir(parents=True, exist_ok=True)
            cluster.broker = start_embedded_broker(log_path=workdir / "logs" / "broker.log")
            cluster.bootstrap = cluster.broker.bootstrap
        cluster.metrics_port = free_port()
        env = {"FRENZY_POLICY": policy, "FRENZY_METRICS_PORT": str(cluster.metrics_port),
               "FRENZY_NAMESPACE": namespace, **(extra_env or {})}
        cluster.spawn("orchestrator", ["frenzy_orchestrator"], env)
        cluster.spawn("predictor", ["frenzy_predictor"], env)
        cluster.spawn("scheduler", ["frenzy_scheduler"], env)
        # The predictor's memory-error record (a faust worker). Start-up does not wait for it:
        # it reads frenzy.jobs.status from the beginning whenever it is ready.
        cluster.errors_port = free_port()
        cluster.spawn("errors", ["frenzy_predictor.error_recorder"],
                      {**env, "FRENZY_ERRORS_WEB_PORT": str(cluster.errors_port),
                       "FRENZY_ERRORS_DATA_DIR": str(workdir / "error-recorder")})
        cluster.dashboard_port, cluster.dashboard_ticket = free_port(), secrets.token_urlsafe(24)
        cluster.spawn("dashboard", ["frenzy_dashboard"],
                      {**env, "FRENZY_DASHBOARD_PORT": str(cluster.dashboard_port),
                       "FRENZY_DASHBOARD_LOGIN_TICKET": cluster.dashboard_ticket})
        for node in build_cluster(groups).nodes.values():
            cluster.node_ids.append(node.node_id)
            cluster.spawn(f"agent-{node.node_id}", agent_args(node.node_id, node.gpu_type,
                                                               node.total_gpus, workdir), env)
        wait_ready(cluster, timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_ready(cluster: LocalCluster, timeout_s: float) -> None:
    """Ready when gRPC answers and every node has sent a heartbeat."""
    from frenzy.client import FrenzyClient

    deadline = time.monotonic() + timeout_s
    wait_for_port("127.0.0.1", cluster.grpc_port, timeout_s)
    with FrenzyClient(cluster.grpc_address) as client:
        while time.monotonic() < deadline:
            if cluster.dead():
                raise RuntimeError(f"processes exited during start-up: {cluster.dead()}; "
                                   f"see {cluster.workdir / 'logs'}")
            if len(client.list_nodes()) >= len(cluster.node_ids):
                return
            time.sleep(0.2)
    raise TimeoutError(f"cluster not ready after {timeout_s}s; see {cluster.workdir / 'logs'}")


@click.command("up")
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_CLUSTER, show_default=True, help="node-group YAML")
@click.option("--grpc-port", default=50051, show_default=True, type=click.IntRange(1, 65535))
@click.option("--policy", default="has", show_default=True)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path(".frenzy"))
def up_command(cluster_file: Path, grpc_port: int, policy: str, workdir: Path) -> None:
    """Run broker, predictor, scheduler, orchestrator, error recorder and node agents until Ctrl-C."""
    from frenzy_scheduler.policies import policy_names

    if policy not in policy_names():
        raise click.BadParameter(f"unknown policy {policy!r}; known: {', '.join(policy_names())}",
                                 param_hint="--policy")
    try:
        cluster = start_cluster(cluster_file, grpc_port, workdir, policy)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--cluster") from None
    click.echo(f"frenzy up: {len(cluster.node_ids)} nodes ready; broker {cluster.bootstrap}")
    click.echo(f"gRPC address: {cluster.grpc_address}  (logs in {workdir / 'logs'}; Ctrl-C stops)")
    click.echo(f"metrics: http://127.0.0.1:{cluster.metrics_port}/metrics")
    click.echo(f"memory prediction errors: http://127.0.0.1:{cluster.errors_port}/memory-errors/ "
               f"(Prometheus text at /metrics on the same port)")
    click.echo(f"dashboard: {cluster.dashboard_link}")
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        while not stopping:
            time.sleep(0.5)
            if cluster.dead():
                click.echo(f"processes exited: {cluster.dead()}; see {workdir / 'logs'}", err=True)
                break
    except KeyboardInterrupt:
        pass
    finally:
        click.echo("frenzy up: shutting down")
        cluster.stop()
