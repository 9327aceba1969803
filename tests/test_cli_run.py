"""``redlease run``: a distributed flock(1), run for real in subprocesses.

Every run goes through ``python -m redlease run`` with ``REDIS_URL`` set to the test
server, and runs a small Python child, so what is checked is what a cron job would see:
exit statuses, the child's environment, signals, and the lock's keys afterwards.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

import redlease
from conftest import cli_environment, redlease_command, run_redlease
from redlease.chaos.proxy import Mode, ProxyHub
from redlease.commands.supervise import RELEASE_AFTER_LOSS

RUN_TIMEOUT = 30


def run_cli(*args: str, url: str | None) -> subprocess.CompletedProcess[str]:
    return run_redlease(*args, url=url, timeout=RUN_TIMEOUT)


def start_cli(*args: str, url: str) -> subprocess.Popen[str]:
    """A ``redlease`` in its own session: no terminal, so signals are ours to send."""
    return subprocess.Popen(
        redlease_command(*args),
        env=cli_environment(url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_for_file(path: Path, process: subprocess.Popen[str], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=RUN_TIMEOUT)
    return process.returncode, stdout, stderr


@pytest.fixture
def name() -> str:
    return f"cli-run-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def held(redlease_url, name):
    """The lock ``name``, held by this test process until the test ends."""
    with redlease.Locks(redlease_url) as locks:
        lock = locks.lock(name)
        lease = lock.acquire()
        yield lease
        if lock.lease is not None:
            lock.release()


# A child that says it started (a file), then sleeps until a signal ends it.
SLEEPER = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).touch()
time.sleep(30)
"""


@pytest.mark.parametrize("status", [0, 3, 7])
def test_exit_status_of_the_command_passes_through(redlease_url, name, status):
    completed = run_cli("run", name, "--", *python(f"raise SystemExit({status})"), url=redlease_url)

    assert completed.returncode == status, completed.stderr


def test_command_killed_by_a_signal_exits_128_plus_the_signal(redlease_url, name):
    kill_myself = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"

    completed = run_cli("run", name, "--", *python(kill_myself), url=redlease_url)

    assert completed.returncode == 128 + signal.SIGKILL


def test_command_sees_the_lease_and_the_fence_grows_between_runs(redlease_url, name):
    show_env = (
        "import json, os; print(json.dumps({k: v for k, v in os.environ.items()"
        " if k.startswith('REDLEASE_')}))"
    )

    seen = []
    for _ in range(2):
        completed = run_cli("run", name, "--", *python(show_env), url=redlease_url)
        assert completed.returncode == 0, completed.stderr
        seen.append(json.loads(completed.stdout.strip().splitlines()[-1]))

    first, second = seen
    assert first["REDLEASE_NAME"] == second["REDLEASE_NAME"] == name
    assert int(second["REDLEASE_FENCE"]) > int(first["REDLEASE_FENCE"]) >= 1
    _, host, pid, owner = first["REDLEASE_TOKEN"].split("|")
    assert host
    assert pid.isdigit()
    assert owner == "owner redlease-run"
    with redis.Redis.from_url(redlease_url) as client:
        assert not client.exists(f"redlease:{{{name}}}")  # released after each run


def test_a_held_lock_is_a_quiet_conflict_that_exits_1_or_the_chosen_code(redlease_url, name, held):
    plain = run_cli("run", name, "--nonblock", "--", *python("print('ran')"), url=redlease_url)
    chosen = run_cli(
        "run", name, "-n", "--conflict-exit-code", "99", "--", "true", url=redlease_url
    )

    assert plain.returncode == 1
    assert plain.stdout == plain.stderr == ""  # as quiet as flock -n: cron mails nothing
    assert chosen.returncode == 99
    assert chosen.stdout == chosen.stderr == ""


def test_verbose_says_why_the_lock_could_not_be_had(redlease_url, name, held):
    completed = run_cli("run", name, "-n", "--verbose", "--", "true", url=redlease_url)

    assert completed.returncode == 1
    assert "held by another owner" in completed.stderr


def test_verbose_says_when_the_lock_was_had(redlease_url, name):
    """Fences count per hash slot, so a shared server may start this name above 1."""
    first = run_cli("run", name, "-v", "--", "true", url=redlease_url)
    second = run_cli("run", name, "-v", "--", "true", url=redlease_url)

    fences = []
    for completed in (first, second):
        assert completed.returncode == 0, completed.stderr
        told = re.search(rf"got the lock {re.escape(repr(name))} \(fence (\d+)\)", completed.stderr)
        assert told, completed.stderr
        fences.append(int(told.group(1)))
    assert 0 < fences[0] < fences[1]


def test_nonblock_fails_at_once_and_wait_gives_up_after_its_time(redlease_url, name, held):
    nonblock = run_cli("run", name, "-n", "-v", "--", "true", url=redlease_url)
    started = time.monotonic()
    waited = run_cli("run", name, "--wait", "0.5", "--", "true", url=redlease_url)
    wait_took = time.monotonic() - started
    told = run_cli("run", name, "--wait", "0.5", "-v", "--", "true", url=redlease_url)

    assert nonblock.returncode == waited.returncode == told.returncode == 1
    assert "after" not in nonblock.stderr  # one try, no wait
    assert wait_took >= 0.5
    assert waited.stderr == ""
    assert "after 0.5 s" in told.stderr


def test_the_command_needs_no_dashes_and_options_after_the_name_still_count(
    redlease_url, name, held
):
    ran = run_cli("run", f"{name}-free", *python("print('ran', 7)"), url=redlease_url)
    conflict = run_cli("run", name, "-n", "-E", "3", *python("print('ran')"), url=redlease_url)
    attached = run_cli("run", name, "--wait=0.2", "-E7", "true", url=redlease_url)
    its_own_options = run_cli(
        "run", f"{name}-free", "--ttl", "5", "sh", "-c", "echo $0 -n", "-v", url=redlease_url
    )

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ran 7"
    assert conflict.returncode == 3
    assert attached.returncode == 7
    assert its_own_options.returncode == 0, its_own_options.stderr
    assert its_own_options.stdout.strip() == "-v -n"  # everything after CMD is CMD's


def test_dash_c_runs_a_shell_command_like_flock(redlease_url, name):
    completed = run_cli(
        "run", name, "-c", 'echo "$REDLEASE_NAME $REDLEASE_FENCE"; exit 4', url=redlease_url
    )

    assert completed.returncode == 4, completed.stderr
    assert completed.stdout.strip() == f"{name} 1"


def test_dash_c_and_a_command_together_are_a_usage_mistake(redlease_url, name):
    completed = run_cli("run", name, "-c", "true", "--", "false", url=redlease_url)

    assert completed.returncode == 64
    assert "-c" in completed.stderr


def test_a_waiting_run_starts_as_soon_as_the_lock_is_released(redlease_url, name, tmp_path):
    with redlease.Locks(redlease_url) as locks:
        lock = locks.lock(name)
        lock.acquire()
        marker = tmp_path / "ran"
        waiting = start_cli(
            "run",
            name,
            "--wait",
            "20",
            "--",
            *python(f"open({str(marker)!r}, 'w')"),
            url=redlease_url,
        )
        time.sleep(1.0)
        assert not marker.exists()
        lock.release()

        status, _, stderr = finish(waiting)

    assert status == 0, stderr
    assert marker.exists()


def test_concurrent_runs_of_one_name_never_overlap(redlease_url, name, tmp_path):
    log = tmp_path / "intervals"
    record = f"""
import time
start = time.time()
time.sleep(0.2)
with open({str(log)!r}, "a") as out:
    out.write(f"{{start}} {{time.time()}}\\n")
"""
    runs = [start_cli("run", name, "--", *python(record), url=redlease_url) for _ in range(4)]
    for process in runs:
        status, _, stderr = finish(process)
        assert status == 0, stderr

    intervals = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(intervals) == 4
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert start >= end


def test_lost_lease_stops_the_command_with_sigterm_and_exits_75(redlease_url, name, tmp_path):
    ready, terminated = tmp_path / "ready", tmp_path / "terminated"
    child = f"""
import pathlib, signal, sys, time
def stop(signum, frame):
    pathlib.Path({str(terminated)!r}).touch()
    sys.exit(5)
signal.signal(signal.SIGTERM, stop)
pathlib.Path({str(ready)!r}).touch()
time.sleep(30)
"""
    run = start_cli("run", name, "--ttl", "1", "--", *python(child), url=redlease_url)
    wait_for_file(ready, run)

    with redis.Redis.from_url(redlease_url) as client:
        assert client.delete(f"redlease:{{{name}}}") == 1
    status, _, stderr = finish(run)

    assert status == 75
    assert terminated.exists()
    [line] = stderr.splitlines()  # one line, not the library's warning and two of ours
    assert "lost the lease" in line
    assert "75" in line


def test_a_lease_lost_to_a_dead_link_does_not_hold_run_up_in_its_release(
    redlease_url, name, tmp_path
):
    """The release after a loss has nothing to save; on a black-holed link it must not
    keep the exit waiting for the socket's timeout."""
    ready = tmp_path / "ready"
    target = redis.Redis.from_url(redlease_url).connection_pool.connection_kwargs
    with ProxyHub() as hub:
        link = hub.link(target["host"], target["port"])
        sleeper = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
        run = start_cli(
            "run", name, "--ttl", "1", "--grace", "0.5", "--", *python(sleeper), url=link.url
        )
        wait_for_file(ready, run)
        link.set(mode=Mode.BLACKHOLE)
        cut = time.monotonic()
        status, _, stderr = finish(run)
        took = time.monotonic() - cut
    assert status == 75, stderr
    assert "lost the lease" in stderr
    limit = 1 + 0.5 + RELEASE_AFTER_LOSS + 2  # ttl, grace, the release's bound, slack
    assert took < limit, f"run exited {took:.1f} s after the link died: {stderr}"


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie its new parent has not reaped yet does not."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_alive(pid)


@pytest.mark.parametrize(
    "stopped_by",
    [
        "lost lease",
        "SIGTERM to run",
        "lost lease, stderr full",
        "lost lease, grandchild deaf to SIGTERM",
        "SIGTERM to run, grandchild deaf to SIGTERM",
    ],
)
def test_the_whole_command_is_stopped_not_only_its_shell(redlease_url, name, tmp_path, stopped_by):
    """A shell command's own children are stopped with it: run exits (and releases the
    lock) only once none of them runs, so no part of the job goes on unprotected (the
    first line of the shell is a child of the shell, not the shell itself); one deaf to
    SIGTERM gets the SIGKILL after --grace."""
    ready = tmp_path / "ready"
    deaf = "deaf" in stopped_by
    worker = (
        "import os, pathlib, signal, time; "
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN); " if deaf else "")
        + f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(60)"
    )
    shell = f"{sys.executable} -c {shlex.quote(worker)}; echo after"
    stderr_to = open("/dev/full", "w") if "full" in stopped_by else subprocess.PIPE
    run = subprocess.Popen(
        redlease_command("run", name, "--ttl", "1", "--grace", "1", "-c", shell),
        env=cli_environment(redlease_url),
        stdout=subprocess.PIPE,
        stderr=stderr_to,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_file(ready, run)
        while not ready.read_text():
            time.sleep(0.02)
        grandchild = int(ready.read_text())
        if stopped_by.startswith("SIGTERM to run"):
            run.send_signal(signal.SIGTERM)
        else:
            with redis.Redis.from_url(redlease_url) as client:
                assert client.delete(f"redlease:{{{name}}}") == 1
        run.wait(RUN_TIMEOUT)
        assert gone_within(grandchild, 0.5), "the shell's child outlived run"
    finally:
        if stderr_to is not subprocess.PIPE:
            stderr_to.close()
        if run.poll() is None:
            run.kill()
            run.wait()
    expected = 128 + signal.SIGTERM if stopped_by.startswith("SIGTERM to run") else 75
    assert run.returncode == expected


def test_a_signal_ignored_when_run_starts_stays_ignored_for_the_command(redlease_url, name):
    """As nohup(1) and flock(1): ``nohup redlease run ...`` keeps the command deaf to SIGHUP."""
    done = subprocess.run(
        ["nohup", *redlease_command("run", name, "-c", "grep SigIgn /proc/self/status")],
        check=False,
        env=cli_environment(redlease_url),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    mask = int(done.stdout.split()[-1], 16)
    assert mask & (1 << (signal.SIGHUP - 1)), done.stdout


def test_a_command_deaf_to_sigterm_is_killed_after_the_grace(redlease_url, name, tmp_path):
    ready = tmp_path / "ready"
    deaf = f"""
import pathlib, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path({str(ready)!r}).touch()
time.sleep(30)
"""
    run = start_cli(
        "run", name, "--ttl", "1", "--grace", "0.5", "--", *python(deaf), url=redlease_url
    )
    wait_for_file(ready, run)

    with redis.Redis.from_url(redlease_url) as client:
        client.delete(f"redlease:{{{name}}}")
    started = time.monotonic()
    status, _, stderr = finish(run)

    assert status == 75
    assert "SIGKILL" in stderr
    assert time.monotonic() - started < 5


def test_sigint_reaches_the_command_and_the_lock_is_released(redlease_url, name, tmp_path):
    ready = tmp_path / "ready"
    run = start_cli("run", name, "--", *python(SLEEPER), str(ready), url=redlease_url)
    wait_for_file(ready, run)

    run.send_signal(signal.SIGINT)
    status, _, stderr = finish(run)

    assert status == 128 + signal.SIGINT, stderr  # the child died of the forwarded SIGINT
    with redis.Redis.from_url(redlease_url) as client:
        assert not client.exists(f"redlease:{{{name}}}")


def test_sigterm_while_waiting_gives_up_and_leaves_the_queue(redlease_url, name, held):
    run = start_cli("run", name, "--", "true", url=redlease_url)
    with redis.Redis.from_url(redlease_url) as client:
        deadline = time.monotonic() + 15
        while not client.llen(f"redlease:{{{name}}}:queue"):
            assert time.monotonic() < deadline, "the run never queued"
            time.sleep(0.02)

        run.send_signal(signal.SIGTERM)
        status, _, _ = finish(run)

        assert status == 128 + signal.SIGTERM
        assert client.llen(f"redlease:{{{name}}}:queue") == 0


@pytest.mark.timeout(60)
def test_a_server_that_stops_during_the_wait_is_69_not_a_conflict(redlease_servers_factory, name):
    """A frozen server is not "held by another owner": a cron job must hear of it."""
    (stopped,) = redlease_servers_factory(1)
    with redlease.Locks(stopped.url) as locks, redis.Redis(port=stopped.port) as client:
        locks.lock(name, ttl=30).acquire()
        run = start_cli("run", name, "-w", "2", "-v", "--", "true", url=stopped.url)
        deadline = time.monotonic() + 15
        while not client.llen(f"redlease:{{{name}}}:queue"):
            assert time.monotonic() < deadline, "the run never queued"
            time.sleep(0.02)
        stopped.pause()
        try:
            status, _, stderr = finish(run)
        finally:
            stopped.resume()
    assert status == 69, stderr
    assert "held by another" not in stderr
    assert "Traceback" not in stderr


# A parent that takes in the orphans of its descendants and never reaps them, as a
# container's PID 1 without an init does: they stay zombies of that process group.
NON_REAPING_PARENT = """
import ctypes, pathlib, signal, subprocess, sys, time
PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
started = pathlib.Path(sys.argv[1])
run = subprocess.Popen(sys.argv[2:], stderr=subprocess.PIPE, text=True)
while not started.exists():
    time.sleep(0.02)
sent = time.monotonic()
run.send_signal(signal.SIGTERM)
_, stderr = run.communicate(timeout=60)
print(round(time.monotonic() - sent, 2), run.returncode)
sys.stdout.write(stderr)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER")
def test_zombies_left_in_the_commands_group_do_not_count_as_running(redlease_url, name, tmp_path):
    """Under a PID 1 that never reaps, the killed ``&`` job of a shell stays a zombie in the
    group: it runs nothing, so it must not hold the lock until a SIGKILL ``--grace`` later."""
    started = tmp_path / "started"
    command = f"touch {shlex.quote(str(started))}; sleep 100 & sleep 101"
    run = redlease_command("run", name, "--grace", "3", "-c", command)
    done = subprocess.run(
        [sys.executable, "-c", NON_REAPING_PARENT, str(started), *run],
        env=cli_environment(redlease_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first, *stderr = done.stdout.splitlines()
    took, status = first.split()
    assert int(status) == 128 + signal.SIGTERM, done.stdout
    assert float(took) < 2.0, done.stdout
    assert not [line for line in stderr if "SIGKILL" in line]


def test_without_a_server_url_run_refuses_with_64(name):
    completed = run_cli("run", name, "--", "true", url=None)

    assert completed.returncode == 64  # a private server would protect nothing
    assert "REDIS_URL" in completed.stderr


def test_unreachable_server_exits_69(name):
    completed = run_cli("run", name, "--", "true", url="redis://127.0.0.1:1/0")

    assert completed.returncode == 69
    assert "cannot reach" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_a_command_that_does_not_exist_exits_127(redlease_url, name):
    completed = run_cli("run", name, "--", "no-such-command-here", url=redlease_url)

    assert completed.returncode == 127
    assert "no-such-command-here" in completed.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["run", "orders"], id="no-command"),
        pytest.param(["run", "orders", "--"], id="empty-command"),
        pytest.param(["run", "orders", "-c"], id="dash-c-without-its-command"),
        pytest.param(["run", "-n"], id="no-name"),
        pytest.param(["run", "orders", "-n", "-w", "1", "--", "true"], id="nonblock-and-wait"),
        pytest.param(["run", "orders", "--wait", "soon", "--", "true"], id="bad-wait"),
        pytest.param(["run", "orders", "-E", "256", "--", "true"], id="exit-code-range"),
        pytest.param(["run", "or{ders}", "--", "true"], id="brace-in-name"),
        pytest.param(["ls", "--", "true"], id="command-for-ls"),
        pytest.param(["run", "orders", "--grace", "1e10", "--", "true"], id="grace-past-clocks"),
        pytest.param(["run", "orders", "--ttl", "0.001", "--", "true"], id="ttl-below-10-ms"),
        pytest.param(["top", "--once", "--interval", "9.3e9"], id="interval-past-clocks"),
        pytest.param(["demo", "watchdog", "--ttl", "0.001"], id="demo-ttl-below-10-ms"),
        pytest.param(["demo", "watchdog", "--ttl", "0.05"], id="demo-ttl-below-its-floor"),
    ],
)
def test_usage_mistakes_exit_64(redlease_url, args):
    completed = run_cli(*args, url=redlease_url)

    assert completed.returncode == 64
    assert "Traceback" not in completed.stderr


def test_a_lease_lost_at_release_is_one_line_too(redlease_url, name):
    delete_my_lease = (
        "import os, redis; redis.Redis.from_url(os.environ['REDIS_URL'])"
        ".delete('redlease:{' + os.environ['REDLEASE_NAME'] + '}')"
    )

    completed = run_cli("run", name, "--", *python(delete_my_lease), url=redlease_url)

    assert completed.returncode == 75
    [line] = completed.stderr.splitlines()
    assert "was lost while the command ran" in line
