"""Every test's histories are checked against the invariants when its prefix is torn down.

The ``settings`` fixtures (tests/conftest.py, tests/fault/conftest.py) call
:func:`verify_after_test` once the test and the fixtures that depend on them (its
services, clients) are done: ``keel workflow verify --all`` over the test's own events
topic, with human decisions' proofs recomputed under the test home's task-token key
when there is one. A broken invariant fails the test at teardown, naming the test, its prefix and
every violation. A test that writes an unsound history on purpose says so with
``@pytest.mark.unsound_history``; ``KEEL_TEST_VERIFY_HISTORIES=0`` turns the check off.

The time spent is summed and printed at the end of the session (``terminal_summary``); in a
parallel session (``pytest -n``) each worker hands its totals to the controller.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pytest

#: The marker of a test that writes an unsound history on purpose.
UNSOUND = "unsound_history"
#: Violations listed in a failure before "... and N more".
SHOWN = 40


@dataclass
class Totals:
    prefixes: int = 0
    workflows: int = 0
    events: int = 0
    violations: int = 0
    seconds: float = 0.0
    failed_tests: list[str] | None = None


TOTALS = Totals(failed_tests=[])


def worker_totals() -> dict[str, object]:
    """This process's totals, for the controller of a parallel session (pytest-xdist)."""
    return dict(vars(TOTALS))


def add_worker_totals(totals: dict[str, object] | None) -> None:
    """Add a parallel worker's totals to this (the controller's) process's."""
    if not totals:
        return
    TOTALS.prefixes += int(totals["prefixes"])  # type: ignore[call-overload]
    TOTALS.workflows += int(totals["workflows"])  # type: ignore[call-overload]
    TOTALS.events += int(totals["events"])  # type: ignore[call-overload]
    TOTALS.violations += int(totals["violations"])  # type: ignore[call-overload]
    TOTALS.seconds += float(totals["seconds"])  # type: ignore[arg-type]
    assert TOTALS.failed_tests is not None
    TOTALS.failed_tests.extend(totals["failed_tests"] or [])  # type: ignore[arg-type]


def verify_after_test(request: pytest.FixtureRequest, settings) -> None:
    """Fail ``request``'s test when its prefix's histories break an invariant."""
    if request.node.get_closest_marker(UNSOUND) is not None:
        return
    if os.environ.get("KEEL_TEST_VERIFY_HISTORIES", "1") == "0":
        return
    from orchestrator.cli.verify import decision_proof_check
    from orchestrator.client.history_io import verify_topic
    from orchestrator.domain.model.errors import InvalidInputError

    began = time.monotonic()
    try:
        report = verify_topic(settings, proof_ok=decision_proof_check(settings))
    except InvalidInputError:  # the test removed its topics: nothing left to check
        return
    finally:
        TOTALS.seconds += time.monotonic() - began
    TOTALS.prefixes += 1
    TOTALS.workflows += report.workflows
    TOTALS.events += report.events
    if report.ok:
        return
    TOTALS.violations += len(report.violations)
    assert TOTALS.failed_tests is not None
    TOTALS.failed_tests.append(request.node.nodeid)
    lines = [f"  {v}" for v in report.violations[:SHOWN]]
    if len(report.violations) > SHOWN:
        lines.append(f"  ... and {len(report.violations) - SHOWN} more")
    wfs = sorted({v.workflow_id for v in report.violations})
    pytest.fail(
        f"history invariants broken by {request.node.nodeid} "
        f"(prefix {settings.topic_prefix}; workflows {', '.join(wfs[:10])}; mark the test "
        f"@pytest.mark.{UNSOUND} only if it writes such a history on purpose):\n"
        + "\n".join(lines),
        pytrace=False,
    )


def terminal_summary(terminalreporter) -> None:
    """One line: how much the checks cost, and which tests broke an invariant."""
    t = TOTALS
    if not t.prefixes:
        return
    terminalreporter.write_line(
        f"history invariants: {t.prefixes} prefixes, {t.workflows} workflows, {t.events} "
        f"events checked in {t.seconds:.1f}s; {t.violations} violations"
    )
    for nodeid in t.failed_tests or []:
        terminalreporter.write_line(f"  broken by {nodeid}", red=True)
