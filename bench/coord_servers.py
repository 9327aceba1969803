"""Private ZooKeeper ensembles and etcd clusters on loopback ports, for bench/coordination.py.

Both come from Debian's packages (``zookeeper`` 3.8 and ``etcd-server`` 3.4) and are run
straight from their binaries with a configuration of our own: every node gets free
loopback ports and a directory under one temporary directory, nothing of the packages'
services, default ports or data directories is touched. A cluster is a context manager;
leaving it (also on an error or Ctrl-C) stops every node and removes the directory.

Durability is each system's default: ZooKeeper and etcd fsync their logs before they
acknowledge a write (that is part of what they promise), while the Valkey servers of the
redlease side persist nothing (``EmbeddedServer``: no RDB, no AOF). The temporary
directories are on the machine's disk, so those fsyncs are real.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from types import TracebackType

from redlease.server import _die_with_parent, free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_POM = "META-INF/maven/org.apache.zookeeper/zookeeper/pom.properties"
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
JAVA = "java"
ETCD = "etcd"
ZOOKEEPER_APT = "apt-get install -y zookeeper"
ETCD_APT = "apt-get install -y etcd-server"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 1.0
LOG_TAIL_CHARS = 1500


class ClusterStartError(RuntimeError):
    """A node did not come up, or the nodes did not agree on a leader in time."""


def zookeeper_missing() -> str | None:
    """Why ZooKeeper cannot run here (with the command that fixes it), or None."""
    if shutil.which(JAVA) is None:
        return f"java not found; install ZooKeeper and its Java with: {ZOOKEEPER_APT}"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} not found; install it with: {ZOOKEEPER_APT}"
    return None


def etcd_missing() -> str | None:
    """Why etcd cannot run here (with the command that fixes it), or None."""
    if shutil.which(ETCD) is None:
        return f"etcd not found; install it with: {ETCD_APT}"
    return None


def zookeeper_version() -> str:
    """The version recorded in the jar's Maven metadata."""
    try:
        with zipfile.ZipFile(ZOOKEEPER_JAR) as jar:
            text = jar.read(ZOOKEEPER_POM).decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return "unknown"
    found = re.search(r"^version=(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else "unknown"


def etcd_version() -> str:
    reply = subprocess.run(
        [ETCD, "--version"], capture_output=True, text=True, timeout=10, check=False
    )
    first = reply.stdout.splitlines()[0] if reply.stdout else ""
    return first.split(":", 1)[1].strip() if ":" in first else "unknown"


class _Cluster:
    """Nodes as child processes in one temporary directory; stopped on the way out."""

    kind = ""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.root = Path(tempfile.mkdtemp(prefix=f"rlbench-{self.kind}-"))
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def __enter__(self) -> _Cluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def _spawn(self, command: list[str], log: Path) -> None:
        self.logs.append(log)
        with log.open("wb") as output:
            self.processes.append(
                subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=self.root,
                    start_new_session=True,  # Ctrl-C reaches us, and we stop the nodes
                    preexec_fn=_die_with_parent(),  # noqa: PLW1509 - sets PDEATHSIG only
                )
            )

    def _check_alive(self) -> None:
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                raise ClusterStartError(
                    f"{self.kind} node exited with {process.returncode}: {_tail(log)}"
                )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)


class ZooKeeperEnsemble(_Cluster):
    """``nodes`` ZooKeeper servers (QuorumPeerMain); one node runs standalone.

    Each node runs in its own JVM (heap capped at 256 MiB, serial GC: two cores are
    shared by everything here), logging warnings only, with the 4-letter-word ``srvr``
    allowed so readiness and the leader can be asked for without a client.
    """

    kind = "zookeeper"

    def __init__(self, nodes: int = 3) -> None:
        super().__init__(nodes)
        self.client_ports = [free_port() for _ in range(nodes)]
        self.quorum_ports = [(free_port(), free_port()) for _ in range(nodes)]

    @property
    def hosts(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.client_ports]

    def start(self) -> None:
        for index in range(self.nodes):
            directory = self.root / f"node{index + 1}"
            (directory / "data").mkdir(parents=True)
            (directory / "data" / "myid").write_text(f"{index + 1}\n")
            config = directory / "zoo.cfg"
            config.write_text(self._config(index, directory / "data"))
            self._spawn(self._command(config, directory), directory / "server.log")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self._modes() is None:
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterStartError(f"zookeeper not serving in time: {_tail(self.logs[0])}")
            time.sleep(0.2)

    def _config(self, index: int, data: Path) -> str:
        lines = [
            "tickTime=2000",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={data}",
            f"clientPort={self.client_ports[index]}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr",
            "autopurge.purgeInterval=0",
        ]
        if self.nodes > 1:
            lines += [
                f"server.{number + 1}=127.0.0.1:{peer}:{election}"
                for number, (peer, election) in enumerate(self.quorum_ports)
            ]
        return "\n".join(lines) + "\n"

    def _command(self, config: Path, directory: Path) -> list[str]:
        classpath = f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}"
        return [
            JAVA,
            "-Xms64m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Djava.net.preferIPv4Stack=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            f"-Dzookeeper.log.dir={directory}",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(config),
        ]

    def _modes(self) -> list[str] | None:
        """Each node's ``Mode:`` (leader, follower, standalone) once all serve, else None."""
        modes = []
        for port in self.client_ports:
            reply = _four_letter_word(port, b"srvr")
            mode = next(
                (line.split(":", 1)[1].strip() for line in reply.splitlines() if "Mode:" in line),
                None,
            )
            if mode not in ("leader", "follower", "standalone"):
                return None
            modes.append(mode)
        return modes

    def leader(self) -> int:
        """Index of the node that leads now (0 for a standalone node)."""
        modes = self._modes() or []
        return next((i for i, mode in enumerate(modes) if mode in ("leader", "standalone")), 0)


def _four_letter_word(port: int, word: bytes) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S) as conn:
            conn.sendall(word)
            chunks = []
            for _ in range(64):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class EtcdCluster(_Cluster):
    """``nodes`` etcd members on loopback, a fresh cluster (``--initial-cluster-state new``).

    Timing flags are etcd's defaults (heartbeat 100 ms, election 1000 ms); logs at warn.
    """

    kind = "etcd"

    def __init__(self, nodes: int = 3) -> None:
        super().__init__(nodes)
        self.client_ports = [free_port() for _ in range(nodes)]
        self.peer_ports = [free_port() for _ in range(nodes)]

    @property
    def endpoints(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.client_ports]

    def start(self) -> None:
        members = ",".join(
            f"n{index + 1}=http://127.0.0.1:{port}" for index, port in enumerate(self.peer_ports)
        )
        for index in range(self.nodes):
            directory = self.root / f"n{index + 1}"
            directory.mkdir()
            client = f"http://127.0.0.1:{self.client_ports[index]}"
            peer = f"http://127.0.0.1:{self.peer_ports[index]}"
            command = [
                ETCD,
                f"--name=n{index + 1}",
                f"--data-dir={directory / 'data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={members}",
                f"--initial-cluster-token=rlbench-{self.root.name}",
                "--initial-cluster-state=new",
                "--logger=zap",
                "--log-level=warn",
            ]
            self._spawn(command, directory / "etcd.log")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(self._healthy(port) for port in self.client_ports):
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterStartError(f"etcd not healthy in time: {_tail(self.logs[0])}")
            time.sleep(0.2)

    def leader(self) -> int:
        """Index of the member that leads now (asked through the maintenance status call)."""
        for index, port in enumerate(self.client_ports):
            status = _post_json(port, "/v3/maintenance/status", {})
            header = status.get("header")
            member = header.get("member_id") if isinstance(header, dict) else None
            if member and status.get("leader") == member:
                return index
        return 0

    @staticmethod
    def _healthy(port: int) -> bool:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT_S)
            try:
                connection.request("GET", "/health")
                body = connection.getresponse().read()
            finally:
                connection.close()
            return bool(json.loads(body).get("health") == "true")
        except (OSError, ValueError, http.client.HTTPException):
            return False


def _post_json(port: int, path: str, payload: dict[str, object]) -> dict[str, object]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT_S * 5)
    try:
        connection.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        reply = json.loads(connection.getresponse().read() or b"{}")
        return reply if isinstance(reply, dict) else {}
    except (OSError, ValueError, http.client.HTTPException):
        return {}
    finally:
        connection.close()


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return "(no log)"
