"""``keel human-tasks list | show | decide``: the human-task inbox and decisions from a terminal.

The inbox is the Redis projection of orchestrator/io/redis/human_task_inbox.py; a decision
goes through the orchestrator exactly as the connector's ``POST /tasks/{token}/decision``
does (orchestrator/client/human_task_decisions.py), acting as an actor of ``KEEL_ACTORS_FILE``.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.app_spec import AppOption, UnusedAppOption, app_from
from orchestrator.cli.output import LazyConsole, new_table
from orchestrator.runtime.exit_codes import ExitCode

if TYPE_CHECKING:
    from orchestrator.config.settings import Settings
    from orchestrator.io.redis.human_task_inbox import TasksView

human_tasks_app = typer.Typer(help="Human tasks: the inbox, and deciding a task.")
console = LazyConsole(highlight=False, emoji=False)

_TOKEN = re.compile(r"^[0-9a-f]{64}$")


def _view(settings: Settings) -> TasksView:
    from orchestrator.io.redis.client_factory import RedisUse, redis_client
    from orchestrator.io.redis.human_task_inbox import TasksView

    return TasksView(redis_client(settings.redis, RedisUse.READ_MODEL), settings.topic_prefix)


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _find(view: TasksView, token_or_id: str) -> dict[str, Any]:
    from orchestrator.domain.authoring.waits import token_hash
    from orchestrator.domain.model.errors import NotFoundError

    task = view.by_token_hash(token_hash(token_or_id)) if _TOKEN.match(token_or_id) else None
    task = task or view.get(token_or_id)
    if task is None:
        raise NotFoundError("no human task has this token or id")
    return task


def _token(settings: Settings, view: TasksView, task_id: str) -> str | None:
    """The task's token, when this process holds the deployment's key (else None)."""
    from orchestrator.domain.authoring.waits import token_hash
    from orchestrator.domain.model.errors import ConfigError
    from orchestrator.trust.human_task_tokens import load_task_tokens

    try:
        tokens = load_task_tokens(settings, create=False)
    except ConfigError:
        return None
    token = tokens.issue(task_id)
    return token if view.token_hash_of(task_id) == token_hash(token) else None


#: Columns ``keel human-tasks list`` keeps to: a terminal, a pager, a mail.
WIDTH = 80


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _summary(evidence: Any) -> str:
    """The evidence as ``key=value`` pairs, scalars first: what the approver weighs."""
    if not isinstance(evidence, dict):
        return json.dumps(evidence)
    scalars = [(k, v) for k, v in evidence.items() if not isinstance(v, dict | list)]
    nested = [(k, v) for k, v in evidence.items() if isinstance(v, dict | list)]
    return ", ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in scalars + nested)


def inbox_lines(rows: list[dict[str, Any]], width: int = WIDTH) -> list[str]:
    """Each task in at most seven lines of ``width`` columns: its id, what it decides, the
    evidence, when it is due, and the command that decides it (with the operation's digest,
    which an approval must carry: docs/human-tasks.md), whose id is never cut."""
    out: list[str] = []
    for t in rows:
        if out:
            out.append("")
        task_id = t["task_id"] or ""
        state = t["status"] or ""
        if t.get("due_at"):
            state += f", due {_when(t['due_at'])}"
        out.append(_fit(f"{task_id}  [{state}]", width))
        who = f"owner {t['owner']}" if t.get("owner") else "roles " + ",".join(t.get("roles", []))
        what = f"  {t.get('task_name') or 'task'}: {t.get('resource') or '-'} ({who}, level"
        out.append(_fit(f"{what} {t['level']})", width))
        out.append(_fit(f"  {_summary(t.get('evidence'))}", width))
        if t.get("status") == "open":
            out.extend(_decide_command(task_id, t.get("operation_digest") or "-", width))
    return out


def _decide_command(task_id: str, digest: str, width: int) -> list[str]:
    """The command that decides a task, never cut: it is there to be copied. An id too
    long for the first line takes a line of its own (longer than ``width`` if it must)."""
    head = f"  keel human-tasks decide {shlex.quote(task_id)} --actor YOU \\"
    if len(head) <= width:
        lines = [head]
    else:
        lines = ["  keel human-tasks decide \\", f"    {shlex.quote(task_id)} --actor YOU \\"]
    return [*lines, "    --approve --operation-digest \\", f"    {digest}"]


@human_tasks_app.command("list")
def list_(
    owner: Annotated[str | None, typer.Option(help="Only tasks assigned to this owner.")] = None,
    role: Annotated[str | None, typer.Option(help="Only tasks this role may decide.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Closed tasks too.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: UnusedAppOption = None,
) -> None:
    """Open human tasks by due time: owner, escalation level, workflow, evidence."""
    from orchestrator.config.settings import load_settings
    from orchestrator.io.redis.read_model import reachable

    settings = load_settings()
    with reachable(settings.redis):
        rows = _view(settings).list(owner=owner, role=role, include_closed=all_)
    if json_:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo("no open human task" if not all_ else "no human task")
        return
    typer.echo("\n".join(inbox_lines(rows)))


@human_tasks_app.command("show")
def show(
    token_or_id: Annotated[str, typer.Argument(metavar="TOKEN|ID", help="Task token or id.")],
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: UnusedAppOption = None,
) -> None:
    """One task: evidence, operation digest, decision, and its history."""
    from orchestrator.config.settings import load_settings
    from orchestrator.io.redis.read_model import reachable

    settings = load_settings()
    view = _view(settings)
    with reachable(settings.redis):
        task = _find(view, token_or_id)
        task["history"] = view.history(task["task_id"])
        if task["status"] == "open":
            task["token"] = _token(settings, view, task["task_id"])
    if json_:
        typer.echo(json.dumps(task))
        return
    console.print(
        f"{task['task_id']}  {task['task_name']}  status={task['status']}  "
        f"owner={task['owner']}  level={task['level']}  roles={','.join(task['roles'])}",
        markup=False,
    )
    console.print(f"workflow: {task['workflow_id']} (run {task['run_id']})", markup=False)
    console.print(
        f"operation: {task['resource']} digest {task['operation_digest']} (schema "
        f"{task['schema_version']}, policy {task['policy_version']})",
        markup=False,
    )
    console.print(
        f"due: {_when(task['due_at'])}  expires: {_when(task['expires_at'])}", markup=False
    )
    console.print(f"evidence: {json.dumps(task['evidence'])}", markup=False)
    if task["decision"]:
        console.print(
            f"decision: {task['decision']} by {task['actor']} at {_when(task['decided_at'])}",
            markup=False,
        )
    if task.get("token"):
        console.print(f"token: {task['token']}", markup=False)
    table = new_table("seq", "time (UTC)", "event", "details")
    for h in task["history"]:
        data = {k: v for k, v in h["data"].items() if k not in ("task_id", "evidence")}
        text = ", ".join(f"{k}={json.dumps(v)}" for k, v in data.items() if v not in (None, ""))
        table.add_row(
            str(h["seq"]),
            _when(h["recorded_at"]),
            h["type"],
            text if len(text) <= 100 else text[:97] + "...",
        )
    console.print(table)


@human_tasks_app.command("decide")
def decide(
    token: Annotated[
        str,
        typer.Argument(
            metavar="TOKEN|ID",
            help="The task's token, or its id (its token is derived with the deployment's key).",
        ),
    ],
    actor: Annotated[str, typer.Option(help="Decide as this actor of KEEL_ACTORS_FILE.")],
    approve: Annotated[bool, typer.Option("--approve", help="Approve the operation.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Reject it.")] = False,
    reason: Annotated[str, typer.Option(help="Why (history keeps its sha256).")] = "",
    operation_digest: Annotated[
        str | None,
        typer.Option(
            help="The digest of the operation you reviewed (`keel human-tasks show`); required to "
            "approve, unless a terminal asks you to confirm the operation it shows."
        ),
    ] = None,
    correction: Annotated[
        str | None,
        typer.Option(
            help="A correction task's corrected data (with --approve): JSON text, @FILE "
            "to read it from a file, or - to read it from stdin."
        ),
    ] = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the orchestrator.")] = 15.0,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    app: AppOption = None,
) -> None:
    """Approve or reject a task as a configured actor; prints what the orchestrator decided.

    The decision is signed with the deployment's key (KEEL_TASK_TOKEN_SECRET), without which
    the orchestrator refuses it. A correction task's approval carries the corrected data
    (``--correction``), which the orchestrator checks against the task's schema.
    """
    from connectors.auth import Actors
    from orchestrator.client.client import KeelClient
    from orchestrator.client.human_task_decisions import DecisionStatus, Refusal
    from orchestrator.client.json_args import read_json_arg
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import (
        CommandRejected,
        ConfigError,
        InvalidInputError,
        KeelError,
        NotFoundError,
    )
    from orchestrator.io.redis.read_model import reachable
    from orchestrator.trust.human_task_tokens import load_task_tokens

    if approve == reject:
        raise InvalidInputError("give exactly one of --approve and --reject")
    confirm = approve and operation_digest is None
    if confirm and not sys.stdin.isatty():
        raise InvalidInputError(
            "--operation-digest is required to approve: `keel human-tasks show ID` shows the "
            "operation and its digest; pass the digest of what you reviewed"
        )
    corrected = None if correction is None else read_json_arg(correction, "--correction")
    settings = load_settings()
    actors = Actors.load(settings.actors_file)
    found = actors.get(actor)
    if found is None:
        where = settings.actors_file or "KEEL_ACTORS_FILE (unset)"
        raise ConfigError(f"actor '{actor[:64]}' is not configured in {where}")
    if operation_digest is not None and not _TOKEN.match(operation_digest):
        raise InvalidInputError("--operation-digest must be the 64-hex digest of the operation")
    if not _TOKEN.match(token):  # a task id: its token is HMAC(key, id)
        token = load_task_tokens(settings, create=False).issue(token)
    client = KeelClient(settings, app_from(app))
    try:
        desk = client.human_tasks(wait_s=wait)
        if confirm:  # a person at a terminal: show the operation, approve only on a yes
            operation_digest = _confirmed_digest(desk, token)
        with reachable(settings.redis):
            outcome = desk.decide(
                token,
                found.name,
                list(found.roles),
                "approve" if approve else "reject",
                reason,
                operation_digest,
                corrected,
            )
    finally:
        client.close()
    body = outcome.as_dict()
    if json_:
        refusal = None if outcome.refusal is None else str(outcome.refusal)
        typer.echo(json.dumps({"refusal": refusal, **body}))
    if outcome.refusal is not None:
        not_found = outcome.refusal is Refusal.NOT_FOUND
        error: type[KeelError] = NotFoundError if not_found else CommandRejected
        raise error(f"refused ({outcome.refusal}): {outcome.reason}")
    if not json_:
        d = body.get("decision") or {}
        line = f"{outcome.status}: {d.get('decision')} by {d.get('actor')} ({body.get('task_id')})"
        console.print(line if outcome.reason is None else f"{line}: {outcome.reason}", markup=False)
    if outcome.status is DecisionStatus.PENDING:
        raise typer.Exit(ExitCode.PENDING)


def _confirmed_digest(desk: Any, token: str) -> str:
    """The digest of the operation the person at the terminal saw and confirmed."""
    from orchestrator.domain.model.errors import CommandRejected, NotFoundError

    task = desk.find(token)
    if task is None:
        raise NotFoundError("no human task has this token")
    console.print(
        f"task {task['task_id']} ({task['task_name']}) of workflow {task['workflow_id']}\n"
        f"operation: {task['resource']}, digest {task['operation_digest']}\n"
        f"evidence: {json.dumps(task.get('evidence'))[:400]}",
        markup=False,
    )
    if not typer.confirm("approve this operation?", default=False):
        raise CommandRejected("not approved: nothing was sent")
    return str(task["operation_digest"])
