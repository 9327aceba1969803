"""What every scenario is, and what a fault sees of the run it is injected into.

A :class:`Scenario` names itself, says what it needs (its target's ``topology``, proxy
links, private servers) and what a user should conclude (``lesson``, printed on the
results page). A :class:`Fault` is a scenario of the counter harness
(:mod:`redlease.chaos.harness`): per injection the harness calls ``prepare`` (most faults
need nothing), waits until a worker is inside its critical section (between its reads and
its writes; with ``fresh_holder``, one whose lock was granted after ``prepare``), calls
``inject``, waits ``duration(run)`` seconds, then ``heal``; the fault's end is when
``heal`` returns.

A fault sees the run through :class:`Scene`, a protocol, so that the fault modules and
the harness do not import each other. ``detects`` says whether the fault can take the
holder's lease away and how soon the holder must be told (see
:mod:`redlease.chaos.detection`); a fault that makes the server unable to answer, or
forget a lease outright, records when in ``serving_again_at`` and ``forgot_at``.
"""

from __future__ import annotations

import dataclasses
import enum
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol, TypeVar

from redlease.chaos.errors import ChaosError
from redlease.chaos.settings import Settings
from redlease.chaos.targets import NamespaceTarget, SingleTarget, Target
from redlease.server import EmbeddedServer

T = TypeVar("T", bound=Target)


class Detects(enum.Enum):
    """How soon the holder of a lease that a fault took away must be told."""

    DEADLINE = "deadline"
    """The holder could not renew: told no later than another client could take it (<= 0)."""
    FORGOTTEN = "forgotten"
    """The server forgot the lease behind the holder's back: told by the lease's deadline."""


class Scenario:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    lesson: ClassVar[str] = ""  # what a user should conclude; the results page prints it
    topology: ClassVar[str] = "single"
    proxied: ClassVar[bool] = False
    needs_server: ClassVar[bool] = False
    expect_unfenced_violations: ClassVar[bool] = False

    def adjust(self, settings: Settings) -> Settings:
        """The settings this scenario runs with (most run with the caller's)."""
        return settings


class Scene(Protocol):
    """What a fault may use of the run it is injected into."""

    @property
    def settings(self) -> Settings: ...

    @property
    def target(self) -> Target: ...

    @property
    def lease_key(self) -> str: ...

    def lock_client(self, timeout: float = ...) -> AbstractContextManager[Any]: ...

    def spawn(self) -> str: ...

    def kill_worker(self, worker: str) -> None: ...

    def pid_of(self, worker: str) -> int: ...

    def probe_keys(self, worker: str) -> dict[str, str]:
        """The lease keys of ``worker``'s probes, by flavour (see ``chaos.probes``)."""
        ...


class Fault(Scenario):
    fresh_holder: ClassVar[bool] = False
    detects: ClassVar[Detects | None] = None

    def __init__(self) -> None:
        self.forgot_at: float | None = None
        self.serving_again_at = 0.0

    def begin(self) -> None:
        """Before each injection: forget what the last one recorded."""
        self.forgot_at = None
        self.serving_again_at = 0.0

    def duration(self, run: Scene) -> float:
        return 0.0

    def prepare(self, run: Scene) -> None:
        """Before waiting for the holder of this injection (nothing by default)."""

    def inject(self, run: Scene, holder: str) -> None:
        raise NotImplementedError

    def heal(self, run: Scene) -> None:
        """Undo the fault (nothing to undo by default); must be safe to call twice."""

    def ended_at(self, healed: float) -> float:
        """Where recovery time starts: when ``heal`` returned, unless the fault says."""
        return healed


def window(settings: Settings) -> Settings:
    """A section long enough (0.6 x TTL, still inside the lease) for another worker to be
    let in while the holder works, even on a loaded machine whose workers wake late."""
    return dataclasses.replace(settings, hold=max(settings.hold, 0.6 * settings.ttl))


def target_of(scenario: Scenario, target: Target, kind: type[T]) -> T:
    if not isinstance(target, kind):
        raise ChaosError(f"scenario {scenario.name} needs a {kind.kind} target")
    return target


def single(scenario: Scenario, target: Target) -> SingleTarget:
    return target_of(scenario, target, SingleTarget)


def namespaces(scenario: Scenario, target: Target) -> NamespaceTarget:
    return target_of(scenario, target, NamespaceTarget)


def lock_server(scenario: Scenario, target: Target) -> EmbeddedServer:
    server = target_of(scenario, target, SingleTarget).lock_server
    if server is None:
        raise ChaosError(f"scenario {scenario.name} needs a private lock server")
    return server
