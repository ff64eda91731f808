"""Shared fixtures. The broker: $KAFKA_BOOTSTRAP, else testcontainers Kafka when Docker answers,
else the embedded Tansu broker on a free port."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
