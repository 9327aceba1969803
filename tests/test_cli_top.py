"""``redlease top``, driven in a real terminal while real worker processes contend.

The view runs in a tmux pane (a real pseudo-terminal, as a user's), the workers are
separate processes taking real locks on the test server (``proc_top_worker.py``), and the
assertions read the screen as tmux shows it: ``capture-pane``, then keys with
``send-keys``. Without tmux these tests skip and say how to install it.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from redlease.commands.state import LockState
from redlease.commands.top_model import Tracker

pytestmark = pytest.mark.timeout(150)

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="needs tmux: apt-get install -y tmux")
WORKER = Path(__file__).with_name("proc_top_worker.py")
SCREEN_TIMEOUT = 30.0
WITHOUT_RICH = "import sys; sys.modules['rich'] = None; from redlease.cli import main; main()"


@dataclass(frozen=True)
class Line:
    """One row of the view: NAME KIND FENCE TTL WAITERS ACQ/S LOST HOLDER."""

    name: str
    kind: str
    fence: int | None
    waiters: int
    rate: float | None
    lost: int
    holder: str


def table_lines(screen: str) -> list[list[str]]:
    """The cells of each line under the header ``NAME KIND ...``, up to the first blank."""
    lines = screen.splitlines()
    starts = [index for index, text in enumerate(lines) if text.split()[:2] == ["NAME", "KIND"]]
    if not starts:
        return []
    found = []
    for text in lines[starts[0] + 1 :]:
        if not text.strip():
            break
        found.append(text.split())
    return found


def rows(screen: str) -> dict[str, Line]:
    found = {}
    for cells in table_lines(screen):
        if len(cells) < 8:
            continue
        fence, rate = cells[2], cells[5]
        found[cells[0]] = Line(
            name=cells[0],
            kind=cells[1],
            fence=None if fence == "-" else int(fence),
            waiters=int(cells[4]),
            rate=None if rate == "-" else float(rate),
            lost=int(cells[6]),
            holder=" ".join(cells[7:]),
        )
    return found


def data_rows(screen: str) -> list[str]:
    """The names in the order the screen shows them."""
    return [cells[0] for cells in table_lines(screen)]


class Pane:
    """A tmux session of its own (private socket), one pane running ``command``."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.socket = f"redlease-top-{uuid.uuid4().hex[:8]}"
        script = f'{shlex.join(command)}; echo "top exited $?"; sleep 600'
        self._tmux(
            "new-session", "-d", "-s", "top", "-x", "150", "-y", "40", "sh", "-c", script, env=env
        )

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        assert TMUX is not None
        completed = subprocess.run(
            [TMUX, "-L", self.socket, "-f", "/dev/null", *args],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return completed.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "top")

    def press(self, key: str) -> None:
        self._tmux("send-keys", "-t", "top", key)

    def wait_for(self, ready: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + SCREEN_TIMEOUT
        while True:
            screen = self.screen()
            if ready(screen):
                return screen
            assert time.monotonic() < deadline, f"never saw {what}; the screen:\n{screen}"
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run(
            [TMUX or "tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False
        )


@pytest.fixture
def prefix() -> str:
    return f"cli-top-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def workers(redlease_url: str, prefix: str) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), redlease_url, prefix, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.send_signal(signal.SIGKILL)
        process.wait()


@pytest.fixture
def pane_factory() -> Iterator[Callable[[list[str], dict[str, str]], Pane]]:
    panes: list[Pane] = []

    def open_pane(command: list[str], env: dict[str, str]) -> Pane:
        pane = Pane(command, env)
        panes.append(pane)
        return pane

    yield open_pane
    for pane in panes:
        pane.close()


def top_env(url: str) -> dict[str, str]:
    return dict(os.environ, REDIS_URL=url, TERM="xterm-256color")


@needs_tmux
def test_top_shows_contention_live_sorts_on_s_and_quits_on_q(
    redlease_url, prefix, workers, pane_factory
):
    for _ in range(3):
        workers("contend", "hot", "0.1")
    calm = workers("hold", "calm")
    pane = pane_factory(
        [sys.executable, "-m", "redlease", "top", "--prefix", prefix], top_env(redlease_url)
    )
    first = rows(pane.wait_for(lambda s: {"hot", "calm"} <= rows(s).keys(), "hot and calm"))
    workers("lapse", "lapse", "1.5")  # after top started: its leases run out under its eyes

    screen = pane.wait_for(
        lambda s: "lapse" in rows(s) and rows(s)["lapse"].lost >= 1, "a lost lease of lapse"
    )
    seen = rows(screen)
    assert (seen["hot"].fence or 0) > (first["hot"].fence or 0)  # the fence grows with each grant
    assert seen["hot"].lost == seen["calm"].lost == 0  # hand-offs are not losses
    assert seen["calm"].fence == 1
    assert seen["calm"].holder == f"{socket.gethostname()}:{calm.pid} thread MainThread"
    busy = pane.wait_for(
        lambda s: rows(s)["hot"].waiters > 0 and (rows(s)["hot"].rate or 0) > 0,
        "waiters queued on hot, and acquisitions per second",
    )
    assert "sort: name" in busy
    assert data_rows(busy) == sorted(data_rows(busy))
    print(f"\nthe screen, sorted by name:\n{busy}")

    pane.press("s")
    by_contention = pane.wait_for(lambda s: "sort: contention" in s, "the contention order")

    assert data_rows(by_contention)[0] == "hot"
    print(f"\nafter s:\n{by_contention}")
    pane.press("q")
    pane.wait_for(lambda s: "top exited 0" in s, "top to quit with status 0")


@needs_tmux
def test_top_without_rich_draws_plain_text_and_quits_on_q(
    redlease_url, prefix, workers, pane_factory
):
    workers("hold", "calm")
    pane = pane_factory(
        [sys.executable, "-c", WITHOUT_RICH, "top", "--prefix", prefix], top_env(redlease_url)
    )

    screen = pane.wait_for(lambda s: "calm" in rows(s), "the plain table")

    assert f"redlease top  {redlease_url}" in screen
    assert rows(screen)["calm"].fence == 1
    pane.press("q")
    pane.wait_for(lambda s: "top exited 0" in s, "top to quit with status 0")


@needs_tmux
@pytest.mark.parametrize("where", ["user-info", "query"])
def test_top_shows_its_url_without_the_password(redlease_servers_factory, pane_factory, where):
    (secured,) = redlease_servers_factory(1, "--requirepass", "s3cret-pw")
    address = f"127.0.0.1:{secured.port}/0"
    url = (
        f"redis://:s3cret-pw@{address}"
        if where == "user-info"
        else f"redis://{address}?password=s3cret-pw"
    )
    pane = pane_factory([sys.executable, "-m", "redlease", "top"], top_env(url))

    screen = pane.wait_for(lambda s: "redlease top" in s, "the title line")

    assert "s3cret-pw" not in screen
    assert "***" in screen
    pane.press("q")
    pane.wait_for(lambda s: "top exited 0" in s, "top to quit with status 0")


@needs_tmux
def test_a_server_gone_shows_as_one_warning_line_under_an_intact_table(
    redlease_servers_factory, prefix, pane_factory
):
    [server] = redlease_servers_factory(1)
    holder = subprocess.Popen(
        [sys.executable, str(WORKER), server.url, prefix, "hold", "calm"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pane = pane_factory(
            [sys.executable, "-m", "redlease", "top", "--prefix", prefix], top_env(server.url)
        )
        pane.wait_for(lambda s: "calm" in rows(s), "the held lock")

        server.stop()
        screen = pane.wait_for(lambda s: "cannot read the locks" in s, "the warning")
    finally:
        holder.kill()
        holder.wait()

    lines = screen.rstrip().splitlines()
    assert lines[0].startswith("redlease top")
    assert lines[2].split() == "NAME KIND FENCE TTL WAITERS ACQ/S LOST HOLDER".split()
    assert lines[3].split()[:3] == ["calm", "lock", "1"]  # the last reading stays on screen
    assert lines[4].startswith("redlease: cannot read the locks")  # one line of its own
    print(f"\nthe screen with the server gone:\n{screen}")
    pane.press("q")
    pane.wait_for(lambda s: "top exited 0" in s, "top to quit with status 0")


def test_top_once_without_a_terminal_prints_one_table_and_exits(redlease_url, prefix, workers):
    for _ in range(2):
        workers("contend", "hot", "0.1")
    workers("hold", "calm")
    deadline = time.monotonic() + SCREEN_TIMEOUT
    while True:
        completed = subprocess.run(
            [sys.executable, "-m", "redlease", "top", "--prefix", prefix, "--sort", "contention"],
            env=dict(os.environ, REDIS_URL=redlease_url),
            capture_output=True,
            text=True,
            check=False,
            timeout=SCREEN_TIMEOUT,
        )
        assert completed.returncode == 0, completed.stderr
        seen = rows(completed.stdout)
        # a rate needs two readings of the name: under load "calm" may show up a reading late
        if {"hot", "calm"} <= seen.keys() and (seen["hot"].rate or 0) > 0:
            if seen["calm"].rate is not None:
                break
        assert time.monotonic() < deadline, completed.stdout

    assert data_rows(completed.stdout)[0] == "hot"
    assert seen["calm"].rate == 0.0
    assert "\x1b" not in completed.stdout  # no screen codes in a pipe


def reading(name: str, token: str | None, ttl_s: float, fence: int) -> LockState:
    from redlease.commands.state import Holder  # noqa: PLC0415

    holders = [] if token is None else [Holder("lock", token, "h", 1, "thread T", ttl_s)]
    return LockState(name=name, fence=fence, waiters=0, holders=holders, slot_counter=fence)


def test_a_lease_seen_in_its_last_moments_and_then_gone_counts_as_lost():
    tracker = Tracker()
    tracker.record([reading("a", "t1", 1.0, 1), reading("b", "u1", 30.0, 1)], 0.0, complete=True)
    check_at = tracker.next_check()
    assert check_at is not None
    assert 0.8 < check_at < 1.0  # just before t1 runs out
    assert tracker.checks_due(check_at) == ["a"]
    tracker.record([reading("a", "t1", 0.1, 1)], check_at, complete=False)
    tracker.record([reading("a", None, 0, 1), reading("b", "u2", 30.0, 2)], 1.2, complete=True)

    by_name = {row.name: row for row in tracker.rows("name")}
    assert by_name["a"].lost == 1  # ran out while held
    assert by_name["b"].lost == 0  # u1 was released with time left: a release, not a loss
    assert by_name["b"].rate == pytest.approx(1 / 1.2)


WARNING = "the server evicts keys under memory pressure"
# The demos' progress bar (rich), the command's log handler, and a library warning mid-bar:
# no demo logs in the command's own process today, so a driver stands in for one.
PROGRESS_DRIVER = f"""
import logging, time
from redlease.commands.output import install_log_handler
from redlease.demos.display import progress

install_log_handler()
with progress("sold", 10) as update:
    for done in range(1, 11):
        update(done)
        if done == 5:
            logging.getLogger("redlease").warning({WARNING!r})
        time.sleep(0.2)
    time.sleep(600)
"""


@needs_tmux
def test_a_warning_during_a_progress_bar_prints_above_it_on_a_line_of_its_own(pane_factory):
    pytest.importorskip("rich")
    pane = pane_factory([sys.executable, "-c", PROGRESS_DRIVER], top_env("redis://unused"))

    screen = pane.wait_for(lambda s: "10/10" in s, "the bar at 10/10")

    lines = [line.strip() for line in screen.splitlines() if line.strip()]
    assert f"redlease: {WARNING}" in lines
    [bar] = [line for line in lines if "10/10" in line]
    assert bar.startswith("sold")
    assert WARNING not in bar
    assert lines.index(f"redlease: {WARNING}") < lines.index(bar)  # above the bar


def test_the_log_handler_prints_one_line_and_is_installed_once(capsys):
    from redlease.commands.output import install_log_handler  # noqa: PLC0415

    logger = logging.getLogger("redlease")
    handlers, propagate = list(logger.handlers), logger.propagate
    try:
        install_log_handler()
        install_log_handler()
        logger.warning("lease on lock %r lost: %s", "x", "why")

        assert capsys.readouterr().err == "redlease: lease on lock 'x' lost: why\n"
        assert len(logger.handlers) == len(handlers) + 1
    finally:
        logger.handlers[:] = handlers
        logger.propagate = propagate


@pytest.mark.parametrize("name", ["cart", "orders:customer-4711:" + "n" * 60])
def test_top_once_keeps_every_column_beside_a_long_holder(redlease_url, prefix, name):
    """A 64-character owner label (the longest ``owner=`` shows) or a long name folds; it
    must not squeeze the fence and TTL out of the table."""
    import redlease  # noqa: PLC0415

    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        lease = locks.lock(name, ttl=60, owner="x" * 64).acquire()
        completed = subprocess.run(
            [sys.executable, "-m", "redlease", "top", "--once", "--prefix", prefix],
            env=dict(os.environ, REDIS_URL=redlease_url, COLUMNS="80"),
            capture_output=True,
            text=True,
            check=False,
            timeout=SCREEN_TIMEOUT,
        )
    assert completed.returncode == 0, completed.stderr
    header = completed.stdout.splitlines()[0].split()
    assert header == ["NAME", "KIND", "FENCE", "TTL", "WAITERS", "ACQ/S", "LOST", "HOLDER"]
    first_row = completed.stdout.splitlines()[1].split()
    assert first_row[1:3] == ["lock", str(lease.fence)]
    assert first_row[3].endswith("s")
    assert "…" not in first_row[3]
    assert name.startswith(first_row[0])


TOP = [sys.executable, "-m", "redlease", "top"]


def top_once(redlease_url: str, prefix: str, interval: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TOP, "--once", "--prefix", prefix, "--interval", str(interval)],
        env=dict(os.environ, REDIS_URL=redlease_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_top_once_counts_a_lease_that_runs_out_between_its_readings(redlease_url, prefix):
    """``--once`` reads a lease again just before it would run out, as the live view does:
    one that ran out while held between the two readings shows in LOST."""
    import redlease  # noqa: PLC0415

    interval = 3.0
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        lapse = locks.lock("lapse", ttl=1.5, renew=False).acquire()
        top = top_once(redlease_url, prefix, interval)
        out, err = top.communicate(timeout=SCREEN_TIMEOUT)
    assert top.returncode == 0, err
    assert lapse.lost
    seen = rows(out)
    assert "lapse" in seen, out
    assert seen["lapse"].lost == 1, out


def test_ctrl_c_on_top_once_exits_0(redlease_url, prefix):
    """ "quit with q or Ctrl-C" (exit 0) holds for the one-table ``top`` too."""
    name = f"top-{prefix}"
    url = f"{redlease_url}{'&' if '?' in redlease_url else '?'}client_name={name}"
    top = top_once(url, prefix, interval=30.0)
    with redis.Redis.from_url(redlease_url) as admin:  # connected: its first reading is on
        deadline = time.monotonic() + SCREEN_TIMEOUT
        while not any(client.get("name") == name for client in admin.client_list()):
            assert time.monotonic() < deadline, "top never connected"
            assert top.poll() is None, top.communicate()
            time.sleep(0.1)
    time.sleep(1.0)  # past the first reading, into the interval
    top.send_signal(signal.SIGINT)
    _, err = top.communicate(timeout=SCREEN_TIMEOUT)
    assert top.returncode == 0, err
