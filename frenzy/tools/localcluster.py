"""`frenzy up`: the whole system on one machine, each service its own OS process with its own log.

`frenzy up` is a supervisor, as compose's `restart: unless-stopped` is: a child that exits is
started again after an exponential backoff, and the cluster keeps running. Nothing outlives it:
every child dies with it (Linux's parent-death signal), and a small reaper process waits for it
to go, however it goes (SIGKILL included), then ends the job processes, which deliberately
outlive an agent restart. A workdir holds one cluster at a time (a lock file), and each start
has its own identity, which the agents write into their job records: a new cluster never
adopts a stranger's jobs. The broker keeps its data in the workdir unless --ephemeral.
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import click

from frenzy.clusterfile import load_cluster_file, node_layout
from frenzy.ports import free_port, wait_for_port
from frenzy.security.bootstrap import LocalSecurity, prepare_local_security
from frenzy.security.clientconfig import registry_path
from frenzy.tools.broker import EmbeddedBroker, die_with_parent, start_embedded_broker
from frenzy.topics import namespace_prefix

DEFAULT_CLUSTER = Path(__file__).resolve().parents[2] / "deploy" / "clusters" / "local.yaml"
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.5, 30.0
HEALTHY_AFTER_S = 10.0  # a child that ran this long starts its backoff afresh
# Here every service shares the machine's cores with the jobs' ranks, which a real cluster
# keeps apart (the control plane on its own machines, daemons on reserved cores): the agents
# start ranks this much below the services' CPU priority (FRENZY_AGENT_RANK_NICE, which the
# environment overrides; docs/reaction-latency.md, eleventh round).
LOCAL_RANK_NICE = 10


def restart_delay_s(consecutive_failures: int) -> float:
    """Exponential backoff before restarting a child: 0.5 s, 1 s, 2 s, ... up to 30 s."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, consecutive_failures - 1))


class WorkdirInUse(RuntimeError):
    """Another cluster holds this workdir's lock."""


@dataclass
class Child:
    """One supervised process and how to start it again."""

    argv: list[str]
    extra_env: dict[str, str] | None
    restarts: int = 0
    failures: int = 0  # consecutive quick exits
    started_s: float = 0.0
    restart_at_s: float | None = None  # set while waiting out the backoff


@dataclass
class LocalCluster:
    """Processes of one local Frenzy cluster; stop() ends them all, job processes included."""

    workdir: Path
    grpc_port: int
    bootstrap: str = ""
    broker: EmbeddedBroker | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    children: dict[str, Child] = field(default_factory=dict)
    node_ids: list[str] = field(default_factory=list)
    metrics_port: int = 0
    errors_port: int = 0  # the predictor's memory-error record (faust web view)
    namespace: str = ""  # topic and consumer-group prefix (FRENZY_NAMESPACE)
    cluster_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    bound_to_parent: bool = False  # children die with this process (`frenzy up`)
    lock_fd: int | None = None
    reaper: subprocess.Popen | None = None
    security: LocalSecurity | None = None  # admin token, join token, CA (frenzy/security)
    dashboard_port: int = 0
    dashboard_ticket: str = ""  # one-time admin login token of the dashboard

    def client(self, timeout_s: float = 10.0):
        """A client with this cluster's admin token and CA, whatever FRENZY_TOKEN says."""
        from frenzy.client import FrenzyClient

        return FrenzyClient(self.grpc_address, timeout_s, token=self.security.admin_token,
                            ca_pem=self.security.ca_pem)

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
        return {"FRENZY_AGENT_RANK_NICE": str(LOCAL_RANK_NICE), **os.environ,
                "KAFKA_BOOTSTRAP": self.bootstrap, "FRENZY_GRPC_PORT": str(self.grpc_port),
                "PYTHONUNBUFFERED": "1", **(extra or {})}

    def spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start `python -m args...` as the child `name`."""
        self.children[name] = Child([sys.executable, "-m", *args], extra_env)
        return self._start(name)

    def _start(self, name: str) -> subprocess.Popen:
        child = self.children[name]
        log_dir = self.workdir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(child.argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env(child.extra_env),
                                    start_new_session=True,
                                    preexec_fn=die_with_parent() if self.bound_to_parent else None)
        child.started_s = time.monotonic()
        child.restart_at_s = None
        self.processes[name] = proc
        self.write_state()
        return proc

    def restart(self, name: str) -> subprocess.Popen:
        """Start a stopped (or killed) process again with its original command."""
        self.stop_process(name)
        return self._start(name)

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

    def supervise(self, now_s: float | None = None) -> list[str]:
        """Restart children (and broker parts) that exited, each after its backoff. Returns
        what was restarted; call it every fraction of a second."""
        now_s = time.monotonic() if now_s is None else now_s
        restarted = []
        if self.broker is not None and self.broker.dead():
            dead = self.broker.dead()
            for part in dead:
                _log_supervisor(self.workdir, "exited", part)
            for part in self.broker.restart_dead():
                _log_supervisor(self.workdir, "restarted", part, restarts=self.broker.restarts[part])
                restarted.append(f"{part} (restart {self.broker.restarts[part]})")
            self.write_state()
        for name, proc in list(self.processes.items()):
            child = self.children[name]
            if proc.poll() is None:
                continue
            if child.restart_at_s is None:
                ran_s = now_s - child.started_s
                child.failures = 1 if ran_s >= HEALTHY_AFTER_S else child.failures + 1
                child.restart_at_s = now_s + restart_delay_s(child.failures)
                _log_supervisor(self.workdir, "exited", name, exit_code=proc.returncode,
                                ran_s=round(ran_s, 1),
                                restart_in_s=restart_delay_s(child.failures))
            if now_s >= child.restart_at_s:
                child.restarts += 1
                new = self._start(name)
                _log_supervisor(self.workdir, "restarted", name, pid=new.pid, restarts=child.restarts)
                restarted.append(f"{name} (restart {child.restarts}, pid {new.pid})")
        return restarted

    def write_state(self, stopped: bool = False) -> None:
        """workdir/cluster.json: who is running, for `frenzy` commands, scripts and bench/chaos."""
        pids = {} if stopped else {name: proc.pid for name, proc in self.processes.items()}
        restarts = {name: child.restarts for name, child in self.children.items()}
        if self.broker is not None and not stopped:
            pids["broker"] = self.broker.process.pid
            restarts["broker"] = self.broker.restarts["broker"]
            if self.broker.s3_process is not None:
                pids["s3"] = self.broker.s3_process.pid
                restarts["s3"] = self.broker.restarts["s3"]
        state = {"cluster_id": self.cluster_id, "supervisor_pid": os.getpid(),
                 "grpc_address": self.grpc_address, "bootstrap": self.bootstrap,
                 "namespace": self.namespace, "pids": pids, "restarts": restarts,
                 "persistent": bool(self.broker and self.broker.persistent)}
        tmp = self.workdir / "cluster.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.workdir / "cluster.json")

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.stop_process(name)
        _kill_job_processes(self.workdir / "agents")
        if self.broker is not None:
            self.broker.stop()
        registry_path(self.grpc_address).unlink(missing_ok=True)
        self.write_state(stopped=True)  # no pids left for the reaper (they may be reused by then)
        if self.reaper is not None and self.reaper.stdin is not None:
            self.reaper.stdin.close()  # nothing left to reap; it exits
            self.reaper.wait(10)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def dead(self) -> list[str]:
        return [name for name, p in self.processes.items() if p.poll() is not None]


def _log_supervisor(workdir: Path, event: str, name: str, **fields) -> None:
    """One JSON line per supervision event, in logs/supervisor.log and on stderr."""
    line = json.dumps({"ts": round(time.time(), 3), "logger": "supervisor", "event": event,
                       "process": name, **fields})
    with open(workdir / "logs" / "supervisor.log", "a") as f:
        f.write(line + "\n")
    print(line, file=sys.stderr, flush=True)


def _kill_job_processes(agents_dir: Path) -> None:
    """Job process groups deliberately survive their agent; at cluster shutdown they go too."""
    for state in agents_dir.glob("*/*/state.json"):
        try:
            os.killpg(json.loads(state.read_text())["pgid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def reap_after_parent(workdir: Path) -> None:
    """The reaper: block until the supervisor's end of the pipe closes (it exited, however),
    then kill whatever of the cluster is left: job process groups and any recorded child."""
    sys.stdin.buffer.read()
    _kill_job_processes(workdir / "agents")
    try:
        pids = json.loads((workdir / "cluster.json").read_text()).get("pids", {})
    except (OSError, ValueError):
        pids = {}
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def lock_workdir(workdir: Path) -> int:
    """Hold workdir/lock for this process's life; the kernel drops it when the process dies."""
    fd = os.open(workdir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise WorkdirInUse(f"workdir {workdir} is in use by another cluster (pid {holder}); "
                           f"stop it first or pass another --workdir") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def agent_args(node_id: str, gpu_type: str, gpus: int, workdir: Path, cluster_id: str = "") -> list[str]:
    return ["frenzy_agent", "--node-id", node_id, "--gpus", f"{gpus}x{gpu_type}",
            "--state-dir", str(workdir / "agents"), "--cluster-id", cluster_id]


def start_cluster(cluster_file: Path = DEFAULT_CLUSTER, grpc_port: int = 50051,
                  workdir: Path = Path(".frenzy"), policy: str = "has",
                  extra_env: dict[str, str] | None = None, timeout_s: float = 60.0,
                  namespace: str = "", persistent: bool = False,
                  bound_to_parent: bool = False) -> LocalCluster:
    """Start broker (unless KAFKA_BOOTSTRAP is set), predictor, scheduler, orchestrator, the
    predictor's memory-error recorder, the dashboard, agents.

    persistent: the embedded broker keeps its data in workdir/broker (`frenzy up`'s default).
    bound_to_parent: every process dies with the caller, however it ends (`frenzy up`).
    """
    nodes = node_layout(load_cluster_file(cluster_file))
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    lock_fd = lock_workdir(workdir)
    cluster = LocalCluster(workdir, grpc_port, namespace=namespace, bound_to_parent=bound_to_parent,
                           lock_fd=lock_fd)
    try:
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        if bound_to_parent:
            cluster.reaper = subprocess.Popen(
                [sys.executable, "-c", "import sys; from pathlib import Path; "
                 "from frenzy.tools.localcluster import reap_after_parent; reap_after_parent(Path(sys.argv[1]))",
                 str(workdir)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=open(workdir / "logs" / "reaper.log", "ab"), start_new_session=True)
        if os.environ.get("KAFKA_BOOTSTRAP"):
            cluster.bootstrap = os.environ["KAFKA_BOOTSTRAP"]
        else:
            cluster.broker = start_embedded_broker(
                log_path=workdir / "logs" / "broker.log", bound_to_parent=bound_to_parent,
                data_dir=workdir / "broker" if persistent else None)
            cluster.bootstrap = cluster.broker.bootstrap
        cluster.metrics_port = free_port()
        cluster.security = prepare_local_security(workdir, cluster.grpc_address)
        env = {"FRENZY_POLICY": policy, "FRENZY_METRICS_PORT": str(cluster.metrics_port),
               "FRENZY_NAMESPACE": namespace, **(extra_env or {})}
        cluster.spawn("orchestrator", ["frenzy_orchestrator"], {**env, **cluster.security.orchestrator_env()})
        cluster.spawn("predictor", ["frenzy_predictor"], {**env, **cluster.security.verifier_env()})
        cluster.spawn("scheduler", ["frenzy_scheduler"], {**env, **cluster.security.verifier_env()})
        # The predictor's memory-error record (a faust worker). Start-up does not wait for it:
        # it reads frenzy.jobs.status from the beginning whenever it is ready.
        cluster.errors_port = free_port()
        cluster.spawn("errors", ["frenzy_predictor.error_recorder"],
                      {**env, "FRENZY_ERRORS_WEB_PORT": str(cluster.errors_port),
                       "FRENZY_ERRORS_DATA_DIR": str(workdir / "error-recorder")})
        cluster.dashboard_port, cluster.dashboard_ticket = free_port(), secrets.token_urlsafe(24)
        cluster.spawn("dashboard", ["frenzy_dashboard"],
                      {**env, **cluster.security.orchestrator_env(),
                       "FRENZY_DASHBOARD_PORT": str(cluster.dashboard_port),
                       "FRENZY_DASHBOARD_LOGIN_TICKET": cluster.dashboard_ticket})
        for node in nodes:
            cluster.node_ids.append(node.node_id)
            cluster.spawn(f"agent-{node.node_id}", agent_args(node.node_id, node.gpu_type,
                                                               node.gpus, workdir,
                                                               cluster.cluster_id),
                          {**env, **cluster.security.agent_env()})
        wait_ready(cluster, timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def scheduler_policy_names() -> list[str]:
    """The policies the installed scheduler knows, asked of the scheduler package itself
    (`python -m frenzy_scheduler.policies`): the registry is the scheduler's, and a tool that
    imported it would depend on the service it supervises."""
    out = subprocess.run([sys.executable, "-m", "frenzy_scheduler.policies"], capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.split()


def wait_ready(cluster: LocalCluster, timeout_s: float) -> None:
    """Ready when gRPC answers and every node has sent a heartbeat."""
    from frenzy.v1 import types_pb2

    deadline = time.monotonic() + timeout_s
    wait_for_port("127.0.0.1", cluster.grpc_port, timeout_s)
    with cluster.client() as client:
        while time.monotonic() < deadline:
            if cluster.dead():
                raise RuntimeError(f"processes exited during start-up: {cluster.dead()}; "
                                   f"see {cluster.workdir / 'logs'}")
            ready = {n.id for n in client.list_nodes() if n.state == types_pb2.NODE_READY}
            if ready >= set(cluster.node_ids):
                return
            time.sleep(0.2)
    raise TimeoutError(f"cluster not ready after {timeout_s}s; see {cluster.workdir / 'logs'}")


@click.command("up")
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_CLUSTER, show_default=True, help="node-group YAML")
@click.option("--grpc-port", default=50051, show_default=True, type=click.IntRange(1, 65535))
@click.option("--policy", default="has", show_default=True)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path(".frenzy"))
@click.option("--ephemeral", is_flag=True,
              help="keep the broker's data in memory only (lost when it stops)")
def up_command(cluster_file: Path, grpc_port: int, policy: str, workdir: Path, ephemeral: bool) -> None:
    """Run and supervise broker, predictor, scheduler, orchestrator, error recorder and node
    agents until Ctrl-C or SIGTERM; a process that exits is restarted with backoff."""
    known = scheduler_policy_names()
    if policy not in known:
        raise click.BadParameter(f"unknown policy {policy!r}; known: {', '.join(known)}",
                                 param_hint="--policy")
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        cluster = start_cluster(cluster_file, grpc_port, workdir, policy, persistent=not ephemeral,
                                bound_to_parent=True)
    except WorkdirInUse as err:
        raise click.UsageError(str(err)) from None
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--cluster") from None
    storage = "memory only (--ephemeral)" if ephemeral else f"data in {workdir / 'broker'}"
    click.echo(f"frenzy up: {len(cluster.node_ids)} nodes ready; broker {cluster.bootstrap} ({storage})")
    click.echo(f"gRPC address: {cluster.grpc_address} over TLS  (logs in {workdir / 'logs'}; Ctrl-C stops)")
    click.echo(f"client config (address, admin token, CA): {cluster.security.client_config_path} "
               f"(frenzy commands in this directory use it)")
    click.echo(f"metrics: http://127.0.0.1:{cluster.metrics_port}/metrics")
    click.echo(f"memory prediction errors: http://127.0.0.1:{cluster.errors_port}/memory-errors/ "
               f"(Prometheus text at /metrics on the same port)")
    click.echo(f"dashboard: {cluster.dashboard_link}")
    try:
        while not stopping:
            time.sleep(0.2)
            for restarted in cluster.supervise():
                click.echo(f"frenzy up: restarted {restarted}", err=True)
    except KeyboardInterrupt:
        pass
    finally:
        click.echo("frenzy up: shutting down")
        cluster.stop()
