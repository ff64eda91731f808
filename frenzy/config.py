"""Settings from FRENZY_* environment variables (pydantic-settings)."""
from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from frenzy.domain import RESHAPE_MIN_INTERVAL_S, SCHEDULER_REDECIDE_S
from frenzy.security.limits import MAX_RECORD_BYTES


class BusSettings(BaseSettings):
    """Kafka client settings shared by every service."""

    model_config = SettingsConfigDict(env_prefix="FRENZY_", extra="ignore")

    # KAFKA_BOOTSTRAP (no prefix) is also honoured; see bootstrap().
    kafka_bootstrap: str = ""
    # Short session timeouts keep group joins quick on the embedded broker (each join waits
    # half the session timeout there); production deployments raise these.
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    # The longest a fetch waits for data: the latency floor of every consumer hop on the
    # embedded broker, which polls its storage at 0, 1/2, 3/4, ... of this wait and answers at
    # the first poll that finds data (a record waits up to half of it, about a sixth on
    # average), at a CPU cost per consumer that grows as it shrinks. Apache Kafka answers as
    # soon as data arrives: set 500 there. docs/architecture.md, "Reaction latency".
    fetch_max_wait_ms: int = 20
    replication_factor: int = Field(1, description="for topics Frenzy creates; 3 on a production cluster")
    # 0: a record goes out at once. Batching needs no delay here: publish_many enqueues a whole
    # flush before the sender runs, so it leaves as one request per partition anyway, while a
    # delay is paid by every acknowledged publish on the event path (bench/e2e_latency.py).
    linger_ms: int = Field(0, description="producer batching delay; raise it for bulk producers")
    offset_hole_wait_s: float = Field(
        2.0, description="how long a consumer waits for a skipped offset to appear before taking "
        "the hole as real (frenzy/offsetgaps.py: the embedded broker can store a later batch first)")
    dedupe_window: int = Field(100_000, description="event ids remembered per consumer")
    # Kafka's default message.max.bytes is 1,048,588; a record is checked before it is produced,
    # so an oversized one fails with its topic and key named, not as a broker error later. The
    # same bound makes a consumer dead-letter a bigger record (frenzy.security.limits).
    max_record_bytes: int = MAX_RECORD_BYTES
    # Prefix of every topic and consumer group, so that several Frenzy deployments (or test
    # clusters) can share one Kafka cluster without seeing each other's events or state.
    namespace: str = ""
    # Kafka transport security, for a broker locked down with TLS, SASL and ACLs
    # (docs/security.md lists what each service may read and write). PLAINTEXT on the local
    # embedded broker, which listens on loopback only.
    kafka_security_protocol: str = Field("PLAINTEXT", description="PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL")
    kafka_sasl_mechanism: str = Field("", description="PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512")
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = ""
    kafka_ssl_cafile: str = ""
    kafka_ssl_certfile: str = ""
    kafka_ssl_keyfile: str = ""
    # GET /healthz on this port answers while the service runs (Kubernetes and compose probes of
    # services without a gRPC or web port); 0 = off.
    health_port: int = 0
    # OTLP/HTTP collector (e.g. http://otel-collector:4318) for traces; "" = tracing off.
    otlp_endpoint: str = ""


class ServiceSettings(BusSettings):
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 50051
    policy: str = Field("has", description="scheduling policy (frenzy_scheduler.policies)")
    # Live elasticity (docs/has.md, "Live"): the scheduler resizes, migrates and preempts running
    # jobs that can resume, and the orchestrator carries it out. Off: no running job is moved.
    reshape_jobs: bool = Field(True, description="scheduler publishes ReshapeJob (resize, "
                               "migrate, preempt) for running jobs that can resume")
    reshape_min_interval_s: float = Field(
        RESHAPE_MIN_INTERVAL_S, description="a job is reshaped at most once per this long (from the orchestrator's "
        "record of its latest reshape, so it holds across scheduler restarts)")
    reshape_young_s: float = Field(
        120.0, description="a job that has not committed a checkpoint yet may still be moved this "
        "long after its start (it loses at most that much work)")
    # The policy's thresholds for a move (has: HasConfig). Unset: the policy's own, the same as
    # in the simulator; the e2e tests, whose jobs run for a minute, lower them.
    reshape_min_gain_s: float | None = Field(None, description="a move saves at least this")
    reshape_min_gain_fraction: float | None = Field(
        None, description="... and at least this share of the job's predicted time left")
    scheduler_holds_ahead: int = Field(
        3, description="running jobs, those expected to end first, whose GPUs the scheduler "
        "places waiting jobs on ahead (HeldPlacements: the orchestrator launches them on the "
        "job's end, without a round trip through the scheduler); 0: none")
    scheduler_redecide_s: float = Field(
        SCHEDULER_REDECIDE_S, description="while jobs wait, the scheduler decides again at least "
        "this often without an event (and when a running job passes its predicted end); Sia's round is 60 s")
    log_dir: str = ".frenzy/logs"
    heartbeat_interval_s: float = 1.0
    node_timeout_s: float = 10.0
    launch_timeout_s: float = Field(60.0, description="LAUNCHING without an agent's report: retried")
    plan_timeout_s: float = Field(120.0, description="SUBMITTED without a plan: failed")
    max_retries: int = 3
    time_scale: float = Field(1.0, description="synthetic workload runs predicted duration x this")
    stop_grace_s: float = 5.0
    # Checkpoint-now (preemption, resize, migration): how long the agent waits for the job to
    # save and exit after SIGUSR1 before it stops it; the last committed checkpoint stands.
    checkpoint_grace_s: float = 60.0
    checkpoint_cleanup_forget_s: float = Field(
        7 * 86400.0, description="orchestrator: a checkpoint delete still unacknowledged this long "
        "after its job ended, to a node that is not up, is dropped (the node is gone for good)")
    checkpoint_root: str = Field("", description="node agent: per-job checkpoint directories "
                                 "when the spec names none (shared storage for multi-node jobs "
                                 "and resume on another node); empty: <state dir>/checkpoints")
    # Node agents' command consumers: there is one per node, so their fetch wait is longer
    # than the control loop's (each idle fetch costs the broker and the agent CPU); the
    # orchestrator -> agent hop waits up to half of it on the embedded broker. 500 on Kafka.
    agent_fetch_max_wait_ms: int = 50
    agent_prestarted_launches: int = Field(
        2, ge=0, description="node agent: launches whose ranks are started ahead, idle until "
        "a job comes (frenzy_agent.prestart: one idle interpreter per GPU each); 0: none, "
        "ranks start with Popen when their job comes")
    agent_rank_nice: int = Field(
        0, ge=0, le=19, description="node agent: how much less CPU priority a job's ranks get "
        "than the agent (`nice -n`, as YARN's yarn.nodemanager.container-executor.os.sched."
        "priority.adjustment), so the agent and any services sharing the node's cores answer "
        "promptly while ranks keep the cores busy; 0: the same priority")
    agent_progress_interval_s: float = Field(
        1.0, ge=0, description="node agent: at most one progress report per running job in "
        "this time (the first one, and a checkpoint commit, go at once; the last step always "
        "rides on the final report). Each report becomes an authoritative status with the whole "
        "job record, read by every status consumer; a trainer stepping ten times a second would "
        "otherwise send ten. MapReduce paces task progress the same way "
        "(mapreduce.task.progress-report.interval: 3 s by default). 0: every step")
    # Heartbeats are fetched in batches: up to this wait, or until this many bytes are ready.
    heartbeat_fetch_max_wait_ms: int = 200
    heartbeat_fetch_min_bytes: int = 65536
    metrics_port: int = Field(0, description="Prometheus /metrics port of the orchestrator; 0 = off")
    # Security (docs/security.md). The directory holds tokens, tenants, the CA and the
    # orchestrator's signing key; empty: no authentication (a service run by hand in development).
    security_dir: str = ""
    grpc_tls: bool = Field(True, description="serve gRPC over TLS with the security dir's certificate")
    command_ttl_s: float = Field(60.0, description="how long a signed agent command stays valid")
    record_ttl_s: float = Field(86400.0, description="how long signed status, heartbeats and "
                                "availability stay valid (a consumer may be down that long)")
    pipeline_max_ttl_s: float = Field(600.0, description="the longest validity a pipeline may sign")
    # Node agents: what they join with, and the key they accept commands from (base64, raw).
    join_token: str = ""
    orchestrator_key: str = ""
    join_token_file: str = Field("", description="read join_token from this file (compose)")
    tenants_file: str = Field("", description="tenants.json (weights, quotas) for the scheduler")
    orchestrator_key_file: str = Field("", description="read orchestrator_key from this file (compose)")


def bootstrap(settings: BusSettings | None = None) -> str:
    import os

    settings = settings or BusSettings()
    value = settings.kafka_bootstrap or os.environ.get("KAFKA_BOOTSTRAP", "")
    if not value:
        raise RuntimeError("no Kafka broker: set KAFKA_BOOTSTRAP or FRENZY_KAFKA_BOOTSTRAP")
    return value


class ErrorRecorderSettings(BusSettings):
    """The predictor's memory-error recorder (faust; `frenzy_predictor.error_recorder`)."""

    errors_web_port: int = Field(0, description="faust web view (/memory-errors/, /metrics); 0 = off")
    errors_web_host: str = "127.0.0.1"
    errors_data_dir: str = Field(".frenzy/error-recorder", description="faust's data directory")


class DashboardSettings(BusSettings):
    """The web dashboard (`frenzy_dashboard`); docs/dashboard.md."""

    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8265
    # The live views follow the event stream; people do not see a quarter second, and a longer
    # fetch wait is fewer idle fetches on the embedded broker.
    dashboard_fetch_max_wait_ms: int = 250
    # A one-time admin login ticket, the token in the link `frenzy up` prints; empty: none.
    dashboard_login_ticket: str = ""
    # JSON {"<token>": {"tenant": ..., "role": "admin"|"user"}}: API tokens that open a session.
    dashboard_tokens_file: str = ""
    # "module:factory" returning an object with authenticate(token) -> Principal | None; tried
    # before the tokens file and the security store.
    dashboard_authenticator: str = ""
    # The orchestrator's security directory: its api tokens (`frenzy token create`) log in here
    # too, with their tenant and role. The dashboard only reads tokens.json there.
    security_dir: str = ""
    dashboard_session_ttl_s: float = 12 * 3600
    # How often a live page is re-rendered even without events (waiting times tick).
    dashboard_refresh_s: float = 2.0
