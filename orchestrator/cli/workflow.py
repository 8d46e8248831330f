"""``keel workflow start | show | list | query | signal | cancel | migrate | verify``.

Every string that came from a user or the read model (ids, names, states, reasons,
history details) prints as written: no console reads markup or emoji (cli/output.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.app_spec import AppOption, service_app
from orchestrator.cli.migrate import migrate
from orchestrator.cli.output import LazyConsole, new_table, styled
from orchestrator.cli.verify import verify
from orchestrator.runtime.exit_codes import ExitCode

if TYPE_CHECKING:
    from orchestrator.client.client import KeelClient

workflow_app = typer.Typer(
    help="Start, inspect, query, signal, cancel, migrate and verify workflows."
)
workflow_app.command("migrate")(migrate)
workflow_app.command("verify")(verify)
console = LazyConsole(highlight=False, emoji=False)

JSON_ARG_HELP = "JSON text, @FILE to read it from a file, or - to read it from stdin."


def _client(app: str | None) -> KeelClient:
    from orchestrator.client.client import KeelClient
    from orchestrator.config.settings import load_settings
    from orchestrator.telemetry.tracing import configure_tracing

    configure_tracing("keel-cli")
    return KeelClient(load_settings(), service_app(app))


@workflow_app.command("start")
def start(
    name: Annotated[str, typer.Argument(help="Workflow definition name.")],
    input_: Annotated[str, typer.Option("--input", help=f"Input: {JSON_ARG_HELP}")] = "{}",
    id_: Annotated[
        str | None, typer.Option("--id", help="Workflow ID (default: generated).")
    ] = None,
    version: Annotated[
        int | None, typer.Option(help="Definition version (default: latest).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the workflow to end.")] = False,
    timeout: Annotated[
        float,
        typer.Option(help="Seconds to wait for the run to be confirmed, and for --wait."),
    ] = 60.0,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: AppOption = None,
) -> None:
    """Start a workflow; an existing ID with the same workflow and input reports the
    existing run, with another it is refused (exit 4); neither writes anything.

    The run reported is the true one: the command waits until the read model shows it.
    ``--wait`` exits 3 when the run ends otherwise than completed, 5 when it has not ended
    within ``--timeout`` (it goes on).
    """
    from orchestrator.client.json_args import read_json_arg
    from orchestrator.domain.model.vocabulary import WorkflowStatus

    input_obj = read_json_arg(input_, "--input")
    client = _client(app)
    result = client.start(name, input_obj, id_, version, confirm_timeout_s=timeout)
    out: dict[str, Any] = {
        "workflow_id": result.workflow_id,
        "run_id": result.run_id,
        "existed": result.existed,
    }
    if not json_:
        verb = "exists" if result.existed else "started"
        console.print(f"{verb}: {result.workflow_id} (run {result.run_id})", markup=False)
    if wait:
        done = client.wait(result.workflow_id, timeout, stop_on_attention=True)
        completed = done.status is WorkflowStatus.COMPLETED
        out.update(status=str(done.status), output=done.output)
        why = done.reason
        if why is not None and not completed:
            out["reason"] = why
        if not json_:
            shown = json.dumps(done.output) if why is None else why
            console.print(f"{done.status}: {shown}", markup=False)
        if not completed:
            if json_:
                typer.echo(json.dumps(out))
            raise typer.Exit(ExitCode.NOT_COMPLETED)
    if json_:
        typer.echo(json.dumps(out))


@workflow_app.command("show")
def show(
    workflow_id: str,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: AppOption = None,
) -> None:
    """A workflow's status, state, output, model-call cost and history."""
    client = _client(app)
    view = client.show(workflow_id)
    if json_:
        typer.echo(json.dumps(view.as_dict()))
        return
    console.print(
        styled(
            (view.workflow_id, "bold"),
            f"  {view.name} v{view.version}  status=",
            (str(view.status), "bold"),
            f"  state={view.state}",
        )
    )
    if view.output is not None:
        console.print(f"output: {json.dumps(view.output)}", markup=False)
    for label, text in (
        ("reason", view.failure_reason),
        ("read model", view.projection_error),
        ("needs attention", view.attention_reason),
    ):
        if text:
            console.print(f"{label}: {text}", markup=False)
    if view.continued_as_new:
        console.print(f"run: {view.run_id} (continued as new)", markup=False)
    if view.parent:
        parent = view.parent
        console.print(
            f"parent: {parent['workflow_id']} (its activity {parent['activity_id']})", markup=False
        )
    for c in view.children:
        console.print(
            f"child: {c['workflow_id']} ({c['workflow']}, {c['status'] or 'not started yet'}) "
            f"for activity {c['activity_id']}",
            markup=False,
        )
    for t in view.human_tasks:
        decided = f" by {t['actor']}" if t.get("actor") else ""
        console.print(
            f"human task {t['task_name']} ({t['task_id']}): {t['status']}{decided}, "
            f"owner {t['owner']}, level {t['level']} (keel human-tasks show {t['task_id']})",
            markup=False,
        )
    _print_llm(view.llm)
    table = new_table("seq", "time (UTC)", "event", "details")
    for h in view.history:
        when = datetime.fromtimestamp(h["recorded_at"] / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
        table.add_row(str(h["seq"]), when, str(h["type"]), _summary(h["data"]))
    console.print(table)


def _print_llm(usage: dict[str, Any]) -> None:
    """Tokens and cost of the run's model calls, then one line per LLM node."""
    if not usage["nodes"]:
        return
    console.print(
        f"llm: {usage['nodes']} node(s), {usage['calls']} call(s), tokens "
        f"prompt={usage['prompt_tokens']} completion={usage['completion_tokens']} "
        f"total={usage['total_tokens']}, cost ${usage['cost_usd']:.6f}, "
        f"cache hits {usage['cache_hits']}",
        markup=False,
    )
    for p in usage["provenance"]:
        console.print(
            f"  seq {p['seq']} {p['activity_type']} ({p['activity_id']}): prompt {p['prompt']}, "
            f"model {p['model']}, cache {p['cache']}, tokens {p['tokens']['total']}, "
            f"cost ${p['cost_usd']:.6f}, requests {', '.join(p['request_ids']) or '-'}",
            markup=False,
        )


def _summary(data: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={json.dumps(v)}" for k, v in data.items() if v not in (None, ""))
    return text if len(text) <= 100 else text[:97] + "..."


@workflow_app.command("list")
def list_(
    name: Annotated[str | None, typer.Option(help="Only runs of this workflow.")] = None,
    version: Annotated[int | None, typer.Option(help="Only runs on this version.")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
    started_after: Annotated[
        str | None, typer.Option(help="Started at or after this ISO-8601 time.")
    ] = None,
    started_before: Annotated[
        str | None, typer.Option(help="Started before this ISO-8601 time.")
    ] = None,
    ended_after: Annotated[
        str | None, typer.Option(help="Ended at or after this ISO-8601 time.")
    ] = None,
    ended_before: Annotated[
        str | None, typer.Option(help="Ended before this ISO-8601 time.")
    ] = None,
    attr: Annotated[
        list[str] | None,
        typer.Option(
            "--attr",
            help="A search attribute condition: NAME=VALUE, or NAME>=N / NAME<=N on numbers "
            "and times (repeatable; all must hold).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="Rows per page.")] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="The next page of the same listing (as printed).")
    ] = None,
    newest_first: Annotated[
        bool, typer.Option("--newest-first/--oldest-first", help="Order by start time.")
    ] = True,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: AppOption = None,
) -> None:
    """Runs known to the read model, filtered, newest first, a page at a time
    (docs/run-search.md)."""
    from orchestrator.client.run_search import RunFilter

    run_filter = RunFilter(
        name=name,
        version=version,
        status=status,
        started_after=started_after,
        started_before=started_before,
        ended_after=ended_after,
        ended_before=ended_before,
        attributes=tuple(attr or ()),
        newest_first=newest_first,
        limit=limit,
        cursor=cursor,
    )
    page = _client(app).list_runs(run_filter)
    if json_:
        typer.echo(json.dumps(page.as_dict()))
        return
    table = new_table(
        "workflow", "name", "version", "status", "started (UTC)", "ended (UTC)", "attributes"
    )
    for r in page.rows:
        shown = r.as_dict()
        table.add_row(
            r.workflow_id,
            r.name,
            str(r.version),
            str(r.status),
            _when(shown["started_at"]),
            _when(shown["ended_at"]),
            " ".join(f"{k}={json.dumps(v)}" for k, v in shown["attributes"].items()),
        )
    console.print(table)
    typer.echo(f"{len(page.rows)} of {page.total} run(s)")
    if page.next_cursor is not None:  # one line whatever the terminal's width: copyable
        typer.echo(f"next page: --cursor {page.next_cursor}")


def _when(iso: str | None) -> str:
    """An ISO-8601 UTC time as the table shows it (``-`` for none)."""
    return "-" if iso is None else iso.replace("T", " ").removesuffix("Z")


@workflow_app.command("query")
def query(
    workflow_id: str,
    name: Annotated[str, typer.Argument(help="A query the run's definition declares.")],
    args: Annotated[
        str | None, typer.Option("--args", help=f"The query's arguments: {JSON_ARG_HELP}")
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the answer with its run, status and seq.")
    ] = False,
    app: AppOption = None,
) -> None:
    """Answer a query of a run from its current state; writes nothing.

    Prints the answer as one line of JSON (docs/workflows.md, "Queries").
    """
    from orchestrator.client.json_args import read_json_arg

    args_obj = None if args is None else read_json_arg(args, "--args")
    answer = _client(app).query(workflow_id, name, args_obj)
    typer.echo(json.dumps(answer.as_dict() if json_ else answer.value))


@workflow_app.command("signal")
def signal_(
    workflow_id: str,
    name: str,
    payload: Annotated[str, typer.Option("--payload", help=f"Payload: {JSON_ARG_HELP}")] = "{}",
    sensitive: Annotated[
        list[str] | None,
        typer.Option(
            "--sensitive", help="A payload field to seal before sending (docs/secrets.md)."
        ),
    ] = None,
    app: AppOption = None,
) -> None:
    """Deliver a signal to a running workflow."""
    from orchestrator.client.json_args import read_json_arg

    payload_obj = read_json_arg(payload, "--payload")
    mid = _client(app).signal(workflow_id, name, payload_obj, tuple(sensitive or ()))
    console.print(f"signal '{name}' sent to {workflow_id} ({mid})", markup=False)


@workflow_app.command("signal-with-start")
def signal_with_start(
    workflow_id: str,
    name: str,
    workflow: Annotated[str, typer.Option("--workflow", help="The workflow to start if absent.")],
    input_: Annotated[str, typer.Option("--input", help=f"Its input: {JSON_ARG_HELP}")] = "{}",
    payload: Annotated[str, typer.Option("--payload", help=f"Payload: {JSON_ARG_HELP}")] = "{}",
    version: Annotated[
        int | None, typer.Option(help="Definition version (default: latest).")
    ] = None,
    app: AppOption = None,
) -> None:
    """Deliver a signal, starting the workflow first if it has no run (one command)."""
    from orchestrator.client.json_args import read_json_arg

    input_obj = read_json_arg(input_, "--input")
    payload_obj = read_json_arg(payload, "--payload")
    client = _client(app)
    mid = client.signal_with_start(
        workflow_id, name, payload_obj, workflow=workflow, input=input_obj, version=version
    )
    typer.echo(f"signal '{name}' sent to {workflow_id}, started as {workflow} if absent ({mid})")


@workflow_app.command("cancel")
def cancel(
    workflow_id: str,
    reason: Annotated[str, typer.Option(help="Why.")] = "cancelled by operator",
    app: AppOption = None,
) -> None:
    """Cancel a running workflow."""
    mid = _client(app).cancel(workflow_id, reason)
    console.print(f"cancel sent to {workflow_id} ({mid})", markup=False)


@workflow_app.command("terminate")
def terminate(
    workflow_id: str,
    reason: Annotated[str, typer.Option(help="Why.")] = "terminated by operator",
    app: AppOption = None,
) -> None:
    """Stop a running workflow at once, compensating nothing (a cancel compensates)."""
    mid = _client(app).terminate(workflow_id, reason)
    typer.echo(f"terminate sent to {workflow_id} ({mid})")
