"""A single-node Apache Kafka broker (KRaft: broker and controller in one JVM) for trying Frenzy on
real Kafka. Optional: `make test` never needs it (the tests use the embedded Tansu broker unless
$KAFKA_BOOTSTRAP is set).

    .venv/bin/python deploy/kafka/run_kafka.py --port 19092          # runs until Ctrl-C
    KAFKA_BOOTSTRAP=127.0.0.1:19092 .venv/bin/pytest -q

The jars come from Maven (deploy/kafka/pom.xml, fetched into .cache/kafka-jars with --fetch) or
from the libs/ folder of an Apache Kafka binary distribution (--jars DIR). It needs Java 17+.
Data lives in a temporary folder, removed on exit unless --data-dir is given.
"""
from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT_JARS = ROOT / ".cache" / "kafka-jars"
DEFAULT_VERSION = "4.1.1"  # keep in step with <kafka.version> in pom.xml

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = kafka: %p %m%n
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = warn
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.console.ref = console
"""


def server_properties(port: int, controller_port: int, log_dir: Path) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",  # default 50: slow first group join on a dev box
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def random_cluster_id() -> str:
    """What `kafka-storage random-uuid` prints: a random UUID, base64url without padding."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):  # would read as an option on the command line
            return cluster_id


def kafka_version(jars: Path) -> str:
    for jar in sorted(jars.glob("kafka_2.13-*.jar")):
        version = jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")
        if version.replace(".", "").isdigit():
            return version
    return "unknown"


def fetch_jars(jars: Path, version: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        sys.exit("mvn not found: install Maven, or pass --jars with a Kafka distribution's libs/")
    jars.mkdir(parents=True, exist_ok=True)
    print(f"fetching Apache Kafka {version} jars into {jars} (mvn) ...", flush=True)
    done = subprocess.run([mvn, "-q", "-f", str(HERE / "pom.xml"), "dependency:copy-dependencies",
                           f"-DoutputDirectory={jars}", "-DincludeScope=runtime",
                           f"-Dkafka.version={version}"])
    if done.returncode:
        sys.exit("mvn could not fetch the jars (is Maven Central reachable?); "
                 "pass --jars <kafka distribution>/libs instead")


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(process: subprocess.Popen, port: int, timeout_s: float) -> None:
    """Until the port answers and the broker serves metadata (it is unfenced by then)."""
    deadline = time.monotonic() + timeout_s
    while not port_answers(port):
        if process.poll() is not None:
            raise RuntimeError(f"Kafka exited with code {process.returncode} during start-up")
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka did not open port {port} within {timeout_s:.0f}s")
        time.sleep(0.1)
    try:
        import asyncio

        from aiokafka.admin import AIOKafkaAdminClient
    except ImportError:
        return

    async def brokers_listed() -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}",
                                    request_timeout_ms=5000)
        try:
            await admin.start()
            return bool((await admin.describe_cluster()).get("brokers"))
        except Exception:
            return False
        finally:
            await admin.close()

    while not asyncio.run(brokers_listed()):
        if process.poll() is not None:
            raise RuntimeError(f"Kafka exited with code {process.returncode} during start-up")
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka answered on {port} but listed no broker in {timeout_s:.0f}s")
        time.sleep(0.5)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=19092, help="PLAINTEXT (client) port")
    parser.add_argument("--controller-port", type=int, default=0, help="KRaft controller port; "
                        "0 = a free one")
    parser.add_argument("--jars", type=Path, default=Path(os.environ.get("KAFKA_JARS", DEFAULT_JARS)),
                        help="folder of Kafka's jars (default .cache/kafka-jars, or $KAFKA_JARS)")
    parser.add_argument("--fetch", action="store_true",
                        help="download the jars with Maven first if the folder has none")
    parser.add_argument("--version", default=DEFAULT_VERSION, help="Kafka version for --fetch")
    parser.add_argument("--heap", default="768m", help="JVM -Xmx")
    parser.add_argument("--data-dir", type=Path, help="keep data here (default: a temp folder, "
                        "removed on exit); an already formatted folder is reused")
    parser.add_argument("--timeout", type=float, default=120.0, help="start-up timeout, seconds")
    args = parser.parse_args()

    java = shutil.which("java")
    if java is None:
        sys.exit("java not found: Apache Kafka 4 needs Java 17 or newer")
    jars = args.jars.resolve()
    if not any(jars.glob("kafka_2.13-*.jar")):
        if not args.fetch:
            sys.exit(f"no kafka_2.13-*.jar in {jars}: run with --fetch (needs Maven Central) "
                     "or pass --jars <kafka distribution>/libs")
        fetch_jars(jars, args.version)
    version = kafka_version(jars)
    if port_answers(args.port):
        sys.exit(f"port {args.port} is already in use")

    temporary = args.data_dir is None
    data = Path(tempfile.mkdtemp(prefix="frenzy-kafka-")) if temporary else args.data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    log_dir = data / "log"
    controller_port = args.controller_port or free_port()
    config = data / "server.properties"
    config.write_text(server_properties(args.port, controller_port, log_dir))
    log4j = data / "log4j2.properties"
    log4j.write_text(LOG4J2.format(log=data / "kafka.log"))
    classpath = f"{jars}{os.sep}*"
    jvm = [java, f"-Xmx{args.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
           f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]

    process = None
    try:
        if not (log_dir / "meta.properties").exists():
            subprocess.run([*jvm, "kafka.tools.StorageTool", "format", "-t", random_cluster_id(),
                            "-c", str(config)], check=True, stdout=subprocess.DEVNULL)
        started = time.monotonic()
        process = subprocess.Popen([*jvm, "kafka.Kafka", str(config)], stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        wait_ready(process, args.port, args.timeout)
        print(f"apache-kafka {version} ready in {time.monotonic() - started:.1f}s "
              f"(pid {process.pid}, data {data}, log {data / 'kafka.log'})")
        print(f"KAFKA_BOOTSTRAP=127.0.0.1:{args.port}", flush=True)
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)  # also when started with SIGINT ignored
        process.wait()
        print(f"Kafka exited with code {process.returncode}; see {data / 'kafka.log'}")
    except KeyboardInterrupt:
        pass
    finally:
        if process is not None and process.poll() is None:
            process.terminate()  # kafka.Kafka shuts down cleanly on SIGTERM
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if temporary:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
