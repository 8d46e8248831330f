"""Every exit status a Keel process or ``keel`` command ends with, in one place.

One code, one meaning, so a script can branch on it; docs/configuration.md ("Exit status")
lists each and ``tests/unit/cli/test_exit_codes.py`` holds the two together. It lives here,
below every process and the CLI, because the services (orchestrator, worker) exit with
:attr:`ExitCode.RESTART` too.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode"]


class ExitCode(IntEnum):
    """The exit statuses of ``keel`` and of Keel's services."""

    #: Done.
    OK = 0
    #: An expected failure (a ``KeelError``, Kafka or Redis failing the command) printed
    #: as one ``error:`` line, or a check that found a problem (``replay-check``,
    #: ``workflow verify``, ``workflow migrate`` refused, ``schemas export --check``).
    FAILED = 1
    #: A usage error: typer's usage text and the reason.
    USAGE = 2
    #: ``workflow start --wait``: the run ended (or stopped for an operator) otherwise
    #: than ``completed``.
    NOT_COMPLETED = 3
    #: ``workflow start``: the id names a run of another workflow or input.
    ID_CONFLICT = 4
    #: Sent, but no answer within the wait; the outcome is still to come (``workflow
    #: start --wait`` timing out, ``human-tasks decide``, ``workflow migrate``).
    PENDING = 5
    #: ``infra status``: a process or service is not healthy.
    UNHEALTHY = 6
    #: A service gave up on a client it could not recover (too many resets, a stalled
    #: call) and exits for its supervisor to restart it.
    RESTART = 70
    #: Interrupted (Ctrl-C).
    INTERRUPTED = 130
