"""The ``keel`` command line: one typer application, one sub-app per area.

Exit status: :class:`~orchestrator.runtime.exit_codes.ExitCode`, one meaning per code
(docs/configuration.md, "Exit status"). An expected failure (a
:class:`~orchestrator.domain.model.errors.KeelError`, or Kafka or Redis failing the command)
is one line on stderr, with every URL password redacted; anything else is a bug and keeps
its traceback.

Start-up carries only what the command run needs: the command modules import typer and
the standard library at the top, rich on first output (``output.py``), and the runtime,
clients and settings inside the command bodies, so ``keel orchestrator`` reaches its
broker without loading the client, the connector, the local-stack tooling or rich
(git show 6f66b40:docs/performance.md, "Recovery").
"""

from __future__ import annotations

import sys

import typer

from orchestrator.cli import (
    connector,
    dlq,
    human_task_commands,
    limits_view,
    sagas,
    schedule_commands,
    schemas,
    services,
    topic_commands,
    versioning,
    workflow,
)
from orchestrator.cli.output import LazyConsole
from orchestrator.runtime.exit_codes import ExitCode

app = typer.Typer(
    name="keel",
    help="Keel: durable, event-sourced workflows on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(topic_commands.topics_app, name="topics")
app.add_typer(workflow.workflow_app, name="workflow")
app.add_typer(services.projections_app, name="projections")
app.add_typer(dlq.dlq_app, name="dlq")
app.add_typer(human_task_commands.human_tasks_app, name="human-tasks")
app.add_typer(schemas.schemas_app, name="schemas")
app.add_typer(schedule_commands.schedules_app, name="schedules")
workflow.workflow_app.command("resolve")(dlq.resolve)
workflow.workflow_app.command("export")(versioning.export)
app.command("replay-check")(versioning.replay_check)
app.command("orchestrator")(services.orchestrator)
app.command("worker")(services.worker)
app.command("projector")(services.projector)
app.command("sagas")(sagas.sagas)
app.command("connector")(connector.connector)
app.command("workers")(limits_view.workers)


def _add_tools(app: typer.Typer) -> None:
    """The dev tools' commands (``keel infra``, ``dev``, ``bench``, ``demo``), registered by
    whatever installed distribution declares a ``keel.tools`` entry point: the tools live in
    ``ops/``, which the product never imports."""
    from importlib.metadata import entry_points

    for tool in sorted(entry_points(group="keel.tools"), key=lambda e: e.name):
        tool.load()(app)


_add_tools(app)

err_console = LazyConsole(stderr=True, highlight=False, soft_wrap=True)


def error_line(exc: BaseException) -> str:
    """The one line an expected failure prints: no newline, no password."""
    from orchestrator.config.settings import redact

    return "error: " + " ".join(redact(str(exc)).split())


def exit_code_of(exc: BaseException) -> ExitCode | None:
    """The exit status of an expected failure (a :class:`KeelError`; imported here: only a
    failure pays for it), None for anything else: the kinds a script branches on have a
    code of their own, every other kind is :attr:`ExitCode.FAILED`."""
    from orchestrator.domain.model.errors import (
        KeelError,
        WaitTimeoutError,
        WorkflowIdConflictError,
    )

    if isinstance(exc, WorkflowIdConflictError):
        return ExitCode.ID_CONFLICT
    if isinstance(exc, WaitTimeoutError):
        return ExitCode.PENDING
    return ExitCode.FAILED if isinstance(exc, KeelError) else None


def _server_failure(exc: BaseException) -> str | None:
    """The one line for Kafka or Redis failing a command (unreachable, timed out,
    refusing), None for anything else; the client modules are looked up, never loaded."""
    kafka = sys.modules.get("confluent_kafka")
    if kafka is not None and isinstance(exc, kafka.KafkaException):
        err = exc.args[0] if exc.args else None
        why = str(err.str()) if err is not None and hasattr(err, "str") else str(exc)
        return f"Kafka failed the command: {why} (is it running? KEEL_BOOTSTRAP_SERVERS)"
    redis = sys.modules.get("redis")
    if redis is not None and isinstance(exc, redis.RedisError):
        return f"Redis failed the command: {exc} (is it running? KEEL_REDIS_URL)"
    return None


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        code = app(args=argv, prog_name="keel", standalone_mode=False)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted", markup=False)
        sys.exit(ExitCode.INTERRUPTED)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # usage errors: typer prints the usage and why
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err_console.print(f"error: {exc.format_message()}", markup=False)
        sys.exit(exc.exit_code)
    except Exception as exc:  # a KeelError or a server's failure is expected; else a bug
        server = _server_failure(exc)
        if server is not None:
            err_console.print(error_line(RuntimeError(server)), markup=False)
            sys.exit(ExitCode.FAILED)
        code = exit_code_of(exc)
        if code is None:
            raise
        err_console.print(error_line(exc), markup=False)
        sys.exit(code)
    sys.exit(code if isinstance(code, int) else ExitCode.OK)


if __name__ == "__main__":
    main()
