"""What every demo stands on, from the command line to the verdict.

A demo module keeps only what is its own: its settings (whose fields are its options),
the jobs its worker processes run, what it reads from Redis when they are done, and how
it tells its result. This module does the rest the same way for all of them:

* :func:`demo` registers a demo: options from its settings, plus ``--json``;
* :func:`present` runs it: the progress display, the server (``--url``, ``REDIS_URL`` or a
  private one), and then the summary or the JSON object and the exit code;
* :func:`session` is one run on that server: a key namespace of its own (deleted
  afterwards), a client for the parent's own reads, and :meth:`Session.crew`, which starts
  the worker processes and drives the display through the stages of the run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import redis

from redlease.demos.base import Demo, add_options, finish, reachable_server, settings_from
from redlease.demos.crew import Crew, Event, Job, run_crew
from redlease.demos.display import Mode, Progress, Stage, staged
from redlease.demos.namespace import RunKeys, remove_keys
from redlease.server import resolve_url

__all__ = ["Session", "demo", "present", "session"]

SettingsT = TypeVar("SettingsT")
ResultT = TypeVar("ResultT")


def demo(
    *,
    name: str,
    summary: str,
    description: str,
    settings: type[SettingsT],
    play: Callable[[str, SettingsT, Progress], ResultT],
    show: Callable[[ResultT], None],
    violation: Callable[[ResultT], str | None],
    shown: str = "the table",
) -> Demo:
    """A :class:`Demo` whose options are the fields of ``settings``.

    ``play(url, settings, progress)`` runs it and returns its result; ``show`` prints the
    result for a reader (``shown`` names what ``--json`` replaces); ``violation`` says what
    went wrong although the lock was on, or None.
    """

    def configure(parser: argparse.ArgumentParser) -> None:
        add_options(parser, settings)
        parser.add_argument(
            "--json",
            action="store_true",
            help=f"print one JSON object with the figures instead of {shown}",
        )

    def run(args: argparse.Namespace) -> int:
        chosen = settings_from(args, settings)
        return present(args, lambda url, progress: play(url, chosen, progress), show, violation)

    return Demo(name, summary, description, configure, run)


def present(
    args: argparse.Namespace,
    play: Callable[[str, Progress], ResultT],
    show: Callable[[ResultT], None],
    violation: Callable[[ResultT], str | None],
) -> int:
    """Run ``play`` on the server of ``args.url`` under the display; print; the exit code."""
    with staged(Mode.choose(args.json)) as progress:
        private = resolve_url(args.url) is None
        progress.stage("starting a private server" if private else "reaching the server")
        with reachable_server(args.url) as url:
            result = play(url, progress)
    return finish(result, args.json, show, violation(result))


@contextmanager
def session(url: str, name: str, progress: Progress) -> Iterator[Session]:
    """One run of the demo ``name`` on the server at ``url``; its keys are deleted at the end."""
    client = redis.Redis.from_url(url)
    run = Session(url, name, progress, RunKeys.fresh(name), client)
    try:
        yield run
    finally:
        try:
            remove_keys(client, run.keys.pattern)
        finally:
            client.close()


@dataclass(frozen=True)
class Session:
    """One run: the server, the display, the run's own keys and a client for the parent."""

    url: str
    name: str
    progress: Progress
    keys: RunKeys
    client: redis.Redis

    def crew(
        self,
        tasks: Sequence[tuple[Job, Any]],
        *,
        who: str,
        stage: Stage,
        count: Callable[[float], int],
        limit: float,
        on_event: Callable[[Event], None] = lambda event: None,
    ) -> Crew:
        """Run the worker processes (see :func:`~redlease.demos.crew.run_crew`).

        The display says "starting ``who``" and counts the workers that are ready, then
        shows ``stage`` with ``count(seconds since the start)`` until they are done.
        """
        progress = self.progress
        progress.stage(f"starting {who}", len(tasks), "ready")

        def on_ready(ready: int) -> None:
            progress.update(ready)
            if ready == len(tasks):
                progress.stage(stage.text, stage.total, stage.unit)

        crew = run_crew(
            self.url,
            self.name,
            tasks,
            limit=limit,
            on_ready=on_ready,
            tick=lambda elapsed: progress.update(count(elapsed)),
            on_event=on_event,
        )
        progress.stage("collecting the results")
        return crew
