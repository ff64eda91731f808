"""Shared fixtures. The broker: $KAFKA_BOOTSTRAP, else testcontainers Kafka when Docker answers,
else the embedded Tansu broker on a free port. `local_cluster` starts real clusters on it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

# The suite runs the scheduler's Python source, here and in every process it starts: its tests
# patch policy internals, which the compiled build's classes refuse. tests/test_native_build.py
# checks that build against the source (frenzy_scheduler/native.py), and runs the tests that
# patch nothing on it (FRENZY_TEST_ON_BUILD: the build's directory).
if os.environ.get("FRENZY_TEST_ON_BUILD"):
    os.environ["FRENZY_NATIVE"] = "1"
    os.environ["FRENZY_NATIVE_DIR"] = os.environ["FRENZY_TEST_ON_BUILD"]
else:
    os.environ["FRENZY_NATIVE"] = "0"

if TYPE_CHECKING:
    from frenzy.tools.localcluster import LocalCluster


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield os.environ["KAFKA_BOOTSTRAP"]
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as kafka:
            yield kafka.get_bootstrap_server()
        return
    from frenzy.tools.broker import start_embedded_broker

    with start_embedded_broker() as broker:
        yield broker.bootstrap


@pytest.fixture(scope="module")
def local_cluster(kafka_bootstrap, tmp_path_factory) -> Iterator[Callable[..., LocalCluster]]:
    """A factory of real local clusters (every service a process, `frenzy up`'s start_cluster) on
    the session's broker; each cluster it started stops when the module ends (a test may stop
    one earlier). A module's fixture is usually

        @pytest.fixture(scope="module")
        def cluster(local_cluster):
            return local_cluster("sdk")

    namespace: the module's own topic and group prefix (FRENZY_NAMESPACE), so modules sharing the
    broker never see each other's events. cluster_file: a file in tests/data. time_scale: the
    synthetic workload's FRENZY_TIME_SCALE (None: the agent's default, for trainer jobs).
    extra_env: further settings for every service. workdir: default a fresh temporary folder.

    start_cluster takes its broker from KAFKA_BOOTSTRAP, so the factory sets it for the session
    (the same value every module gets from kafka_bootstrap).
    """
    from frenzy.ports import free_port
    from frenzy.tools.localcluster import start_cluster

    started: list[LocalCluster] = []

    def start(namespace: str, cluster_file: str = "cluster_small.yaml",
              time_scale: float | None = 0.01, extra_env: dict[str, str] | None = None,
              workdir: Path | None = None) -> LocalCluster:
        os.environ["KAFKA_BOOTSTRAP"] = kafka_bootstrap
        env = {} if time_scale is None else {"FRENZY_TIME_SCALE": str(time_scale)}
        cluster = start_cluster(DATA / cluster_file, free_port(), workdir or tmp_path_factory.mktemp("frenzy"),
                                "has", extra_env={**env, **(extra_env or {})}, namespace=namespace)
        started.append(cluster)
        return cluster

    yield start
    for cluster in reversed(started):
        cluster.stop()
