"""The operator's commands, run for real: ``ls``, ``show``, ``release --force``, ``server``.

The locks are held by this test process through the library, so the expected holder is
``os.getpid()`` and the expected fence is the lease's own; every test uses a key prefix
of its own, so the listings hold only what the test put there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

import redlease
from conftest import allowing, eventually, run_redlease
from redlease import Lease, ReleaseOutcome
from redlease.server import EmbeddedServer

RUN_TIMEOUT = 30


def run_cli(*args: str, url: str | None) -> subprocess.CompletedProcess[str]:
    return run_redlease(*args, url=url, timeout=RUN_TIMEOUT)


def run_into_closed_pipe(*args: str, url: str | None) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe whose reader is gone, as ``redlease ls | head -1`` ends up."""
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    if url is not None:
        env["REDIS_URL"] = url
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [sys.executable, "-m", "redlease", *args],
            env=env,
            stdout=writer,
            stderr=subprocess.PIPE,
            check=False,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    finally:
        os.close(writer)


def last_json(completed: subprocess.CompletedProcess[str]) -> object:
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture
def prefix() -> str:
    return f"cli-admin-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def locks(redlease_url, prefix):
    with redlease.Locks(redlease_url, prefix=prefix) as client:
        yield client


def test_ls_lists_every_kind_of_held_lock_with_holder_and_fence(redlease_url, prefix, locks):
    lock = locks.lock("orders:42")
    lease = lock.acquire()
    rw = locks.rw_lock("catalog")
    rw.write.acquire()
    semaphore = locks.semaphore("pool", 3)
    permits = [semaphore.acquire(), semaphore.acquire()]
    locks.latch("start").try_set_count(2)
    locks.lock("free-again").acquire()
    locks.lock("free-again").release()

    listed = last_json(run_cli("ls", "--json", "--prefix", prefix, url=redlease_url))

    assert isinstance(listed, list)
    by_name = {entry["name"]: entry for entry in listed}
    assert sorted(by_name) == ["catalog", "orders:42", "pool", "start"]
    orders = by_name["orders:42"]
    assert orders["kinds"] == ["lock"]
    assert orders["fence"] == lease.fence
    assert orders["waiters"] == 0
    [holder] = orders["holders"]
    assert holder["pid"] == os.getpid()
    assert holder["host"] == socket.gethostname()
    assert holder["thread"].startswith("thread ")
    assert holder["token"] == lease.token
    assert 0 < holder["ttl_s"] <= 30
    assert by_name["catalog"]["kinds"] == ["rw-write"]
    assert [h["kind"] for h in by_name["pool"]["holders"]] == ["shared", "shared"]
    assert by_name["start"]["latch"]["count"] == 2
    lock.release()
    rw.write.release()
    for permit in permits:
        semaphore.release(permit)


def test_ls_pattern_and_table_show_only_matching_names(redlease_url, prefix, locks):
    locks.lock("report:daily").acquire()
    locks.lock("backup").acquire()

    listed = last_json(run_cli("ls", "report:*", "--json", "--prefix", prefix, url=redlease_url))
    table = run_cli("ls", "--prefix", prefix, url=redlease_url)

    assert [entry["name"] for entry in listed] == ["report:daily"]
    assert table.returncode == 0, table.stderr
    assert "report:daily" in table.stdout
    assert "backup" in table.stdout
    assert f"{socket.gethostname()}:{os.getpid()}" in table.stdout


def test_show_tells_the_waiters_and_a_free_lock(redlease_url, prefix, locks):
    lease = locks.lock("nightly").acquire()
    with redis.Redis.from_url(redlease_url) as client:
        client.rpush(f"{prefix}:{{nightly}}:queue", "30000:c1d2:abc|otherhost|4242|thread T")

    shown = last_json(run_cli("show", "nightly", "--json", "--prefix", prefix, url=redlease_url))
    free = run_cli("show", "never-taken", "--prefix", prefix, url=redlease_url)

    assert isinstance(shown, dict)
    assert shown["fence"] == lease.fence
    assert shown["waiters"] == 1
    assert shown["queued"][0]["host"] == "otherhost"
    assert shown["queued"][0]["pid"] == 4242
    assert free.returncode == 0
    assert "never-taken: free" in free.stdout


def test_release_needs_force_and_then_evicts_the_holder_but_keeps_the_fence(
    redlease_url, prefix, locks
):
    lock = locks.lock("stuck")
    lease = lock.acquire()

    refused = run_cli("release", "stuck", "--prefix", prefix, url=redlease_url)
    assert refused.returncode == 64
    assert f"{socket.gethostname()}:{os.getpid()}" in refused.stderr
    assert lock.owned()

    forced = run_cli("release", "stuck", "--force", "--prefix", prefix, url=redlease_url)
    assert forced.returncode == 0, forced.stderr
    assert f"{socket.gethostname()}:{os.getpid()}" in forced.stdout
    assert "fence counter" in forced.stdout

    with redlease.Locks(redlease_url, prefix=prefix) as other:
        successor = other.lock("stuck").acquire(timeout=0)
        assert successor.fence > lease.fence  # tokens never go back
        other.lock("stuck").release()
    assert lock.release() is ReleaseOutcome.EXPIRED
    assert lease.lost


def wait_in_thread(acquire: Any) -> tuple[threading.Thread, list[object]]:
    """Run ``acquire`` in a thread; its lease, or the error it raised, lands in the list."""
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(acquire())
        except Exception as error:  # the assertion names it
            outcome.append(error)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, outcome


def test_release_force_wakes_the_waiters_of_a_lock(redlease_url, prefix, locks, round_trip):
    """The waiter takes the freed lock within round trips, not when the evicted lease
    (30 s, renewed) would have run out."""
    locks.lock("stuck", ttl=30).acquire()
    with redlease.Locks(redlease_url, prefix=prefix) as other:
        thread, outcome = wait_in_thread(lambda: other.lock("stuck").acquire(timeout=25))
        with redis.Redis.from_url(redlease_url) as client:
            assert asyncio.run(eventually(lambda: client.llen(f"{prefix}:{{stuck}}:queue"), 10))
        forced = run_cli("release", "stuck", "--force", "--prefix", prefix, url=redlease_url)
        evicted = time.monotonic()
        assert forced.returncode == 0, forced.stderr
        thread.join(30)
        took = time.monotonic() - evicted
        assert [type(got) for got in outcome] == [Lease], outcome
        assert took < allowing(round_trip, quiet=2.0), f"the waiter got it {took:.2f} s later"


def test_release_force_lets_the_first_waiter_of_a_lock_in_first(redlease_url, prefix, locks):
    """As a release hands a lock to the queue's head, so does a forced release: the
    waiters do not race for it."""
    locks.lock("line", ttl=30).acquire()
    order: list[int] = []
    clients = [redlease.Locks(redlease_url, prefix=prefix) for _ in range(5)]

    def wait(number: int) -> None:
        lock = clients[number].lock("line")
        lock.acquire(timeout=25)
        order.append(number)
        lock.release()

    threads = []
    with redis.Redis.from_url(redlease_url) as client:
        for number in range(len(clients)):
            threads.append(threading.Thread(target=wait, args=(number,), daemon=True))
            threads[-1].start()
            queue, length = f"{prefix}:{{line}}:queue", number + 1
            assert asyncio.run(eventually(lambda q=queue, n=length: client.llen(q) == n, 10))
    forced = run_cli("release", "line", "--force", "--prefix", prefix, url=redlease_url)
    assert forced.returncode == 0, forced.stderr
    for thread in threads:
        thread.join(30)
    for other in clients:
        other.close()
    assert order == list(range(len(clients)))


def test_release_force_wakes_every_reader_behind_an_evicted_writer(
    redlease_url, prefix, locks, round_trip
):
    locks.rw_lock("table", ttl=30).write.acquire()
    with redlease.Locks(redlease_url, prefix=prefix) as other:
        waiting = [
            wait_in_thread(lambda: other.rw_lock("table").read.acquire(timeout=25))
            for _ in range(2)
        ]
        with redis.Redis.from_url(redlease_url) as client:
            queue = f"{prefix}:{{table}}:queue"
            assert asyncio.run(eventually(lambda: client.llen(queue) == 2, 10))
        forced = run_cli("release", "table", "--force", "--prefix", prefix, url=redlease_url)
        evicted = time.monotonic()
        assert forced.returncode == 0, forced.stderr
        for thread, outcome in waiting:
            thread.join(30)
            assert [type(got) for got in outcome] == [Lease], outcome
        took = time.monotonic() - evicted
        assert took < allowing(round_trip, quiet=2.0), f"the readers got in {took:.2f} s later"


def test_release_of_a_free_lock_says_there_was_nothing(redlease_url, prefix):
    completed = run_cli("release", "idle", "--force", "--prefix", prefix, url=redlease_url)

    assert completed.returncode == 0
    assert "nothing removed" in completed.stdout


def test_admin_commands_need_a_server_url():
    for args in (["ls"], ["show", "x"], ["release", "x", "--force"]):
        completed = run_cli(*args, url=None)
        assert completed.returncode == 64
        assert "REDIS_URL" in completed.stderr


def test_server_prints_a_url_that_answers_and_stops_on_sigterm():
    server = subprocess.Popen(
        [sys.executable, "-m", "redlease", "server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url:
            _, stderr = server.communicate(timeout=RUN_TIMEOUT)
            pytest.skip(f"no server binary: {stderr}")
        with redis.Redis.from_url(url, socket_timeout=5) as client:
            assert client.ping()

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=RUN_TIMEOUT) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    port = urlsplit(url).port
    assert port is not None
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


@pytest.mark.cluster
@pytest.mark.timeout(90)
def test_ls_finds_locks_on_every_master_of_a_cluster(redlease_cluster, prefix):
    redlease_cluster.wait_until_ok(timeout=20)
    masters = {node.port for node in redlease_cluster.masters()}
    names, ports = [], set()
    for number in range(200):
        name = f"job-{number}"
        port = redlease_cluster.master_for_key(f"{prefix}:{{{name}}}").port
        if port not in ports:
            names.append(name)
            ports.add(port)
        if ports == masters:
            break
    with redlease.Locks(redlease_cluster.url, prefix=prefix, cluster=True) as locks:
        leases = {name: locks.lock(name).acquire() for name in names}

        listed = last_json(
            run_cli("ls", "--json", "--cluster", "--prefix", prefix, url=redlease_cluster.url)
        )

        assert isinstance(listed, list)
        assert {entry["name"]: entry["fence"] for entry in listed} == {
            name: lease.fence for name, lease in leases.items()
        }
        for name in names:
            locks.lock(name).release()


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["ls"], id="ls"),
        pytest.param(["ls", "--json"], id="ls-json"),
        pytest.param(["show", "held"], id="show"),
        pytest.param(["show", "held", "--json"], id="show-json"),
        pytest.param(["release", "free", "--force"], id="release"),
        pytest.param(["top", "--once", "--interval", "0.1"], id="top"),
        pytest.param(["--help"], id="help"),
        pytest.param(["run", "--help"], id="run-help"),
        pytest.param(["server"], id="server"),
        pytest.param(["demo", "one-order", "--workers", "2", "--attempts", "2"], id="demo"),
    ],
)
def test_a_closed_pipe_ends_every_command_quietly_like_coreutils(redlease_url, prefix, locks, args):
    locks.lock("held").acquire()
    extra = ["--prefix", prefix] if args[0] in ("ls", "show", "release", "top") else []

    completed = run_into_closed_pipe(*args, *extra, url=redlease_url)

    assert completed.stderr.strip() == ""  # no traceback, no "Exception ignored"
    if "--help" in args:
        assert completed.returncode == 0  # argparse itself ignores a closed pipe
    else:
        assert completed.returncode == 128 + signal.SIGPIPE  # what a shell sees of `seq | head`


def test_show_piped_into_head_prints_no_traceback(redlease_url, prefix, locks):
    locks.lock("nightly").acquire()
    command = " ".join(
        [sys.executable, "-m", "redlease", "show", "nightly", "--prefix", prefix, "| head -2"]
    )

    completed = subprocess.run(
        ["sh", "-c", command],
        env=dict(os.environ, REDIS_URL=redlease_url),
        capture_output=True,
        text=True,
        check=False,
        timeout=RUN_TIMEOUT,
    )

    assert completed.returncode == 0
    assert len(completed.stdout.splitlines()) == 2
    assert completed.stderr == ""


def test_ls_and_show_label_holders_readably(redlease_url, prefix, locks):
    locks.lock("by-thread").acquire()
    locks.lock("by-object", owner=object()).acquire()
    locks.lock("by-name", owner="worker-7|blue").acquire()

    table = run_cli("ls", "--prefix", prefix, url=redlease_url)
    listed = last_json(run_cli("ls", "--json", "--prefix", prefix, url=redlease_url))
    shown = run_cli("show", "by-object", "--prefix", prefix, url=redlease_url)

    assert table.returncode == 0, table.stderr
    here = f"{socket.gethostname()}:{os.getpid()}"
    assert f"{here} thread MainThread" in table.stdout
    assert f"{here} owner worker-7|blue" in table.stdout
    assert "object at 0x" not in table.stdout + shown.stdout
    assert re.search(rf"{re.escape(here)} owner object#[0-9a-f]{{6}}", shown.stdout)
    assert isinstance(listed, list)
    by_name = {entry["name"]: entry["holders"][0] for entry in listed}
    assert by_name["by-name"]["thread"] == "owner worker-7|blue"
    assert by_name["by-name"]["pid"] == os.getpid()


@pytest.mark.parametrize(
    "value",
    [
        "justavalue",
        "a|b|c|d",
        "tok|host|notapid|thread X",
        "t|h|²|o",
        "t|h|٣٤|o",
        "t|h|1" + "0" * 5000 + "|o",
    ],
)
def test_a_lease_written_by_another_program_shows_as_its_token(redlease_url, prefix, server, value):
    """cli.md: the parts are null for a token without redlease's ``…|host|pid|owner``
    tail, and the label is the token. A pid that is no number is no such tail."""
    server.set(f"{prefix}:{{foreign}}", f"1:{value}", px=60_000)
    listed = last_json(run_cli("ls", "--json", "--prefix", prefix, url=redlease_url))
    (holder,) = {entry["name"]: entry for entry in listed}["foreign"]["holders"]
    assert (holder["host"], holder["pid"], holder["thread"]) == (None, None, None)
    assert holder["label"] == value


def test_a_url_where_the_command_goes_is_not_echoed_with_its_password():
    """``redlease --url URL ls``: argparse takes the URL for the command and quotes it."""
    completed = run_cli("--url", "redis://u:s3cret@h:1/0?password=s3cret", "ls", url=None)
    assert completed.returncode == 64
    assert "s3cret" not in completed.stderr
    assert "u:***@h" in completed.stderr


def test_main_in_process_leaves_the_callers_logging_as_it_was(redlease_url, prefix, capsys):
    from redlease.cli import main  # noqa: PLC0415

    logger = logging.getLogger("redlease")
    before = (list(logger.handlers), logger.propagate)

    code = main(["release", "idle", "--force", "--prefix", prefix, "--url", redlease_url])

    assert code == 0
    assert "nothing removed" in capsys.readouterr().out
    assert (list(logger.handlers), logger.propagate) == before


@pytest.mark.parametrize(
    "url",
    ["localhost:6379", "http://127.0.0.1:6379/0", "redis://127.0.0.1:99999/0", "redis://h/abc"],
)
@pytest.mark.parametrize("args", [["ls"], ["show", "x"], ["run", "x", "--", "true"]])
def test_a_url_that_is_no_redis_url_is_a_usage_mistake(url, args):
    """Not exit 1, which ``run`` uses for "someone else holds the lock"."""
    completed = run_cli(args[0], "--url", url, *args[1:], url=None)

    assert completed.returncode == 64, completed.stderr
    assert "Traceback" not in completed.stderr
    assert "redis://" in completed.stderr


@pytest.mark.parametrize("args", [["ls"], ["show", "x"], ["release", "x", "--force"]])
def test_a_url_scheme_in_capitals_names_the_same_server(redlease_url, args):
    """As for the library: URL schemes ignore case."""
    completed = run_cli(
        args[0], "--url", "REDIS" + redlease_url[len("redis") :], *args[1:], url=None
    )

    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("where", ["user-info", "query"])
def test_a_refused_password_is_not_echoed(redlease_servers_factory, where):
    (secured,) = redlease_servers_factory(1, "--requirepass", "right-pass")
    url = (
        f"redis://:wrong-pass@127.0.0.1:{secured.port}/0"
        if where == "user-info"
        else f"redis://127.0.0.1:{secured.port}/0?password=wrong-pass"
    )
    completed = run_cli("ls", "--url", url, url=None)

    assert completed.returncode == 69, completed.stderr
    assert "wrong-pass" not in completed.stderr
    assert "***" in completed.stderr


@pytest.mark.parametrize(
    ("args", "denied"),
    [
        (("ls",), ["-scan"]),
        (("show", "job"), ["-evalsha", "-eval"]),
        (("run", "job", "URL", "--", sys.executable, "-c", "pass"), ["-evalsha", "-eval"]),
        (("ls",), ["-time"]),
        (("show", "job"), ["-pttl"]),
    ],
    ids=["ls", "show", "run", "ls-script", "show-script"],
)
def test_a_permission_the_server_refuses_is_77_naming_it(redlease_servers_factory, args, denied):
    """An ACL refusal is no internal failure (70): it is the server's answer, and the user
    can fix it by granting the permission."""
    (server,) = redlease_servers_factory(1)
    with redis.Redis(port=server.port) as admin:
        admin.execute_command("ACL", "SETUSER", "ops", "on", ">pw", "~*", "&*", "+@all", *denied)
    url = f"redis://ops:pw@127.0.0.1:{server.port}/0"
    held = redlease.Locks(server.url)
    held.lock("job", ttl=30).acquire()  # a lock to read: the tools' own script runs
    if "URL" not in args:
        args = (*args, "URL")
    at = args.index("URL")
    completed = run_cli(*args[:at], "--url", url, *args[at + 1 :], url=None)

    held.close()
    assert completed.returncode == 77, completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr
    if denied[0] in ("-scan", "-evalsha"):  # the server names a command a script runs
        named = {"-scan": "'scan'", "-evalsha": "'eval"}[denied[0]]  # only on some servers
        assert "permission" in completed.stderr.lower(), completed.stderr
        assert named in completed.stderr.lower(), completed.stderr


def test_server_refuses_a_port_out_of_range():
    completed = run_cli("server", "--port", "70000", url=None)

    assert completed.returncode == 64, completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_stdout_that_cannot_be_written_is_one_line_and_74(redlease_url, prefix, locks):
    locks.lock("held").acquire()
    with open("/dev/full", "w") as full:
        completed = subprocess.run(
            [sys.executable, "-m", "redlease", "ls", "--prefix", prefix, "--url", redlease_url],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )

    assert completed.returncode == 74
    assert "Traceback" not in completed.stderr
    assert "Exception ignored" not in completed.stderr
    assert "No space left" in completed.stderr


@pytest.mark.parametrize("args", [["ls"], ["show", "x"], ["release", "x", "--force"]])
def test_a_server_that_stops_answering_after_the_probe_is_69_naming_it(args):
    """``CLIENT PAUSE ... WRITE`` (as a failover does): PING still answers, scripts wait."""
    with EmbeddedServer() as server, redlease.Locks(server.url) as locks:
        locks.lock("x", ttl=60).acquire()  # something for ls to read
        with redis.Redis.from_url(server.url) as admin:
            admin.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
            try:
                done = run_cli(*args, url=server.url)
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
    assert done.returncode == 69, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert server.url in line
