"""When to send an interrupted acquire's withdrawal again, from the background.

An acquire cut short (a cancellation, Ctrl-C, a socket timeout) may still be on its way: a
stopped server keeps it in its socket and runs it when it resumes, granting the lock to a
caller that has gone. So the withdrawal is sent until the server answers one, further
apart the longer it stays silent, and once more a moment after that answer (the attempt
may run just after the first withdrawal). The tries end after the lease's TTL and at
least :data:`KEEP_TRYING_S`: past that, a grant the server makes on resuming still ends
by itself within its TTL.
"""

from __future__ import annotations

from collections.abc import Generator

LATE_COMMAND_S = 0.2
"""How long a command sent just before an interruption may still take to run."""
LONGEST_PAUSE_S = 1.0
"""The longest pause between two tries while the server does not answer."""
KEEP_TRYING_S = 30.0
"""How long the tries go on at least (or for the lease's TTL, when that is longer)."""

Schedule = Generator[float, bool, None]


def withdrawal_pauses(ttl_ms: int) -> Schedule:
    """The pause before each try; send back whether the server answered that try."""
    keep_trying_s = max(ttl_ms / 1000, KEEP_TRYING_S)
    waited = 0.0
    pause = LATE_COMMAND_S
    answered_before = False
    while waited + pause <= keep_trying_s:
        answered = yield pause
        waited += pause
        if answered and answered_before:
            return
        answered_before = answered_before or answered
        pause = LATE_COMMAND_S if answered else min(2 * pause, LONGEST_PAUSE_S)
