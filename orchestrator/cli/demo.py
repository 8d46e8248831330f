"""``keel demo``: the bundled workflows through real processes, a crash, and a checked result.

The work lives in ``ops/demo_job.py`` (it drives the example application and the fake ledger),
imported only when the command runs, so the product never imports the examples.
"""

from __future__ import annotations

from typing import Annotated

import typer

DEFAULT_SIZE = 300  # about 15 s on 2 cores


def demo(
    size: Annotated[
        int, typer.Option(min=3, max=5000, help="Workflow runs in the batch (3 kinds in turn).")
    ] = DEFAULT_SIZE,
) -> None:
    """Run a batch of workflows, SIGKILL the orchestrator halfway, check every invariant.

    Needs Kafka and Redis: `keel infra up` first, or KEEL_BOOTSTRAP_SERVERS and
    KEEL_REDIS_URL. Exits 1 if any invariant failed.
    """
    from rich.console import Console

    from ops.demo_job import run_demo
    from orchestrator.settings import load_settings

    console = Console(highlight=False, width=None)
    code = run_demo(load_settings(), size, console)
    raise typer.Exit(code)
