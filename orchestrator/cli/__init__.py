"""The ``keel`` command line (DESIGN §11): one typer application, one sub-app per area.

Expected failures (``KeelError``) end as one line on stderr and exit status 1;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from orchestrator.cli import demo, dlq, infra, services, versioning, workflow
from orchestrator.errors import KeelError

app = typer.Typer(
    name="keel",
    help="Keel: durable, event-sourced workflows on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(infra.infra_app, name="infra")
app.add_typer(infra.topics_app, name="topics")
app.add_typer(workflow.workflow_app, name="workflow")
app.add_typer(services.projections_app, name="projections")
app.add_typer(dlq.dlq_app, name="dlq")
workflow.workflow_app.command("resolve")(dlq.resolve)
workflow.workflow_app.command("export")(versioning.export)
app.command("replay-check")(versioning.replay_check)
app.command("orchestrator")(services.orchestrator)
app.command("worker")(services.worker)
app.command("projector")(services.projector)
app.command("dev")(services.dev)
app.command("bench")(services.bench)
app.command("demo")(demo.demo)

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        code = app(args=argv, prog_name="keel", standalone_mode=False)
    except KeelError as exc:
        err_console.print(f"error: {exc}", markup=False)
        sys.exit(1)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted", markup=False)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors carry their own message
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
