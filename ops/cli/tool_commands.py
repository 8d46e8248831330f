"""The dev tools' commands: ``keel infra up|status|down|fetch``, ``keel dev``, ``keel bench``
and ``keel demo``.

They live with the tools (the local stack, the benchmarks, the demo job), not in the
product: the ``keel`` command finds them through the ``keel.tools`` entry point
(pyproject.toml), so an install without ``ops`` has the product's commands only, and nothing
in the product imports this package (the ``tools-out`` import contract).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.app_spec import AppOption, app_spec
from orchestrator.cli.output import LazyConsole, new_console, new_table, styled
from orchestrator.runtime.exit_codes import ExitCode

if TYPE_CHECKING:
    from rich.text import Text

    from ops.local import StackStatus

__all__ = ["register"]

infra_app = typer.Typer(help="Local Kafka (KRaft) and Redis for a laptop, tests and benchmarks.")
console = LazyConsole(highlight=False, emoji=False)

#: Runs in ``keel demo --basic``'s batch: about 15 s on 2 cores.
DEFAULT_SIZE = 300


def demo(
    size: Annotated[
        int | None,
        typer.Option(
            min=3,
            max=5000,
            help="Invoices in the batch (at least the 30 samples; more are clean small ones), "
            "or with --basic workflow runs (default 300).",
        ),
    ] = None,
    basic: Annotated[
        bool,
        typer.Option("--basic", help="The three small workflows instead of the invoice pipeline."),
    ] = False,
) -> None:
    """Run the invoice pipeline over the sample invoices through a crash, and check it.

    People are played by a script at the connector's task API; the orchestrator and a
    worker are SIGKILLed halfway. Needs Kafka and Redis: `keel infra up` first, or
    KEEL_BOOTSTRAP_SERVERS and KEEL_REDIS_URL. Exits 1 if any invariant failed.
    """
    from orchestrator.config.settings import load_settings

    console = new_console(highlight=False, width=None)
    if basic:
        from ops.demo_job import run_demo

        raise typer.Exit(run_demo(load_settings(), size or DEFAULT_SIZE, console))
    from ops.invoices.invoice_demo import run_invoice_demo

    raise typer.Exit(run_invoice_demo(load_settings(), size or 0, console))


#: ``keel evaluate``'s fault classes unless --faults says: every one for the invoice
#: pipeline; for a workflow of your own (--app), the ones it can be put under.
EVALUATE_FAULTS = (
    "crash,response_loss,duplicate_callbacks,compensation_failure,queue_full,old_schema"
)


def evaluate(
    workflow: Annotated[
        str, typer.Option(help="The workflow to evaluate (invoice_pipeline, or one of --app).")
    ] = "invoice_pipeline",
    app: Annotated[
        str | None,
        typer.Option(
            "--app",
            help="MODULE:ATTR of your own application (with --inputs): its workflow under "
            "every class that can strike it.",
        ),
    ] = None,
    inputs: Annotated[
        Path | None,
        typer.Option(help="With --app: the runs' inputs, a JSON array or JSON lines."),
    ] = None,
    driver: Annotated[
        str | None,
        typer.Option(
            "--driver",
            help="With --app: MODULE:ATTR of a Driver whose rules answer the runs that wait "
            "(signals, webhooks, human tasks) and play the model.",
        ),
    ] = None,
    runs: Annotated[
        int, typer.Option(min=3, max=200, help="Runs per fault class (sample invoices).")
    ] = 12,
    faults: Annotated[
        str,
        typer.Option(
            help="Fault classes, comma-separated: crash, response_loss, duplicate_callbacks, "
            "compensation_failure, queue_full, old_schema (a fault-free batch always runs first)."
        ),
    ] = EVALUATE_FAULTS,
    variants: Annotated[
        str,
        typer.Option(
            help="backbone (the pipeline), agent (the all-agent variant), or both, "
            "comma-separated: the exit code judges the backbone."
        ),
    ] = "backbone,agent",
    out: Annotated[Path, typer.Option(help="Where report.html, report.json and the plots go.")] = (
        Path("evaluation")
    ),
    batch_timeout: Annotated[
        float, typer.Option(min=10, max=3600, help="Seconds a batch may take at most.")
    ] = 240.0,
    seeded_bug: Annotated[
        str | None,
        typer.Option(hidden=True, help="Test only: a bug seeded in the processes."),
    ] = None,
) -> None:
    """Run a workflow under injected faults and report what its histories show.

    One batch per fault class, each on its own topic prefix and fakes, judged from event
    histories and the fakes' own books (docs/evaluation.md). Needs Kafka and Redis:
    `keel infra up` first. Exits 1 if any class fails its verdict.
    """
    from ops.evaluation.evaluation_run import run_evaluation
    from ops.evaluation.fault_plans import parse_faults, parse_variants
    from ops.evaluation.report_plots import require_matplotlib
    from ops.faults.service_faults import SeededBug
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import InvalidInputError

    require_matplotlib()
    console = new_console(highlight=False, width=None)
    chosen, designs = parse_faults(faults), parse_variants(variants)
    if seeded_bug is not None and seeded_bug not in {str(b) for b in SeededBug}:
        raise InvalidInputError(f"unknown seeded bug {seeded_bug!r}; known: {', '.join(SeededBug)}")
    bug = None if seeded_bug is None else SeededBug(seeded_bug)
    settings = load_settings()
    if driver is not None and app is None:
        raise InvalidInputError("--driver answers a workflow of your own: give --app too")
    if app is not None or inputs is not None:
        from ops.evaluation.app_batch import load_inputs
        from ops.evaluation.evaluation_run import run_own_evaluation

        if app is None or inputs is None:
            raise InvalidInputError("a workflow of your own needs both --app and --inputs")
        asked = None if faults == EVALUATE_FAULTS else chosen  # None: what can strike it
        values = load_inputs(inputs, runs)
        raise typer.Exit(
            run_own_evaluation(
                settings, app, workflow, values, asked, out, console, batch_timeout, driver
            )
        )
    raise typer.Exit(
        run_evaluation(settings, workflow, runs, chosen, designs, out, console, batch_timeout, bug)
    )


invoices_app = typer.Typer(help="The invoice pipeline (docs/invoice-pipeline.md).")


@invoices_app.command("submit")
def invoices_submit(
    files: Annotated[list[Path], typer.Argument(help="Invoice files (UTF-8 text).")],
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for each run to end (0: do not wait).")
    ] = 0.0,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """Start one invoice_pipeline run per file (a file already received joins its run)."""
    from ops.invoices.invoice_submit import submit_files

    submit_files(files, wait, json_)


def _print_status(status: StackStatus, as_json: bool, headline: str | None = None) -> None:
    from orchestrator.config.settings import redact

    if as_json:
        typer.echo(json.dumps(status.to_json()))
        return
    if headline:
        console.print(headline)
    if not status.processes:
        console.print("no local stack is running")
        return
    table = new_table("role", "node", "pid", "port", "healthy")
    for p in status.processes:
        mark = styled(("yes", "green") if p.healthy else ("no", "red"))
        table.add_row(p.role, str(p.node_id or "-"), str(p.pid), str(p.port), mark)
    console.print(table)
    console.print(f"KEEL_BOOTSTRAP_SERVERS={redact(status.bootstrap_servers)}", markup=False)
    console.print(f"KEEL_REDIS_URL={redact(status.redis_url)}", markup=False)


@infra_app.command("up")
def up(
    brokers: Annotated[
        int | None,
        typer.Option(help="Number of KRaft nodes (default: the running stack's, else 1)."),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
) -> None:
    """Fetch Kafka once, start the broker(s) and Redis; return when both answer."""
    from ops.local import LocalStack
    from orchestrator.config.settings import load_settings

    stack = LocalStack(load_settings(), brokers=brokers)
    was_running = stack.status().running
    status = stack.up()
    headline = "already running:" if was_running else "started:"
    _print_status(status, json_, headline)


def _verdict(row: dict[str, Any]) -> Text:
    if row["gone"]:
        return styled(f"gone (last report {row['age_s']:.0f}s ago)")
    if row["problems"]:
        return styled(("; ".join(row["problems"]), "red"))
    return styled(("ok", "green"))


def _print_services(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = new_table(
        "service", "prefix", "partitions", "last commit", "resets", "stalled", "quarantined",
        "health",
    )  # fmt: skip
    for r in rows:
        commit = r.get("last_commit_age_s")
        table.add_row(
            r["file"],
            str(r.get("topic_prefix", "-")),
            str(r.get("assigned_partitions", "-")),
            "-" if commit is None else f"{commit:.1f}s ago",
            str(r.get("producer_resets", 0)),
            str(r.get("stalled_calls", 0)),
            str(len(r.get("quarantined", []))),
            _verdict(r),
        )
    console.print(table)


@infra_app.command("status")
def status(json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the local stack's processes and the health Keel's services last reported."""
    from ops.local import LocalStack
    from orchestrator.config.settings import load_settings
    from orchestrator.runtime.health import service_health

    settings = load_settings()
    current = LocalStack(settings).status()
    services = service_health(settings.home)
    if json_:
        typer.echo(json.dumps({**current.to_json(), "services": services}))
    else:
        _print_status(current, False)
        _print_services(services)
    if not current.healthy or any(r["problems"] for r in services):
        raise typer.Exit(ExitCode.UNHEALTHY)


@infra_app.command("down")
def down() -> None:
    """Stop the local stack by its recorded PIDs and wait for every process to exit."""
    from ops.local import LocalStack
    from orchestrator.config.settings import load_settings

    stopped = LocalStack(load_settings()).down()
    if stopped:
        console.print("stopped: " + ", ".join(f"{r.role} (pid {r.pid})" for r in stopped))
    else:
        console.print("nothing was running")


@infra_app.command("fetch")
def fetch() -> None:
    """Fetch the pinned Kafka jars from Maven Central into KEEL_HOME (once)."""
    from ops.local import LocalStack
    from orchestrator.config.settings import load_settings

    path = LocalStack(load_settings()).fetch_kafka()
    console.print(f"Kafka jars in {path}")


def dev(
    app: AppOption = None,
    connector_port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port of the connector (loopback).")
    ] = 8700,
) -> None:
    """Everything in one command: local stack, topics, orchestrator, worker and connector."""
    from ops.local import LocalStack
    from orchestrator.config.settings import load_settings
    from orchestrator.io.kafka.topics import create_topics

    settings = load_settings()
    spec = app_spec(app)  # resolved once: every child loads the same application
    if not settings.bootstrap_servers:
        LocalStack(settings).up()
    create_topics(settings)
    roles = ("orchestrator", "worker", "connector")
    extra = {"connector": ["--port", str(connector_port)]}
    env = os.environ.copy()
    sign_in = "sign in with a token of KEEL_ACTORS_FILE"
    if not env.get("KEEL_ACTORS_FILE"):
        actors, token = dev_actor(settings.home)
        env["KEEL_ACTORS_FILE"] = str(actors)
        sign_in = f"sign in as the demo approver '{DEV_ACTOR}' with the token {token}"
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "orchestrator", role, "--app", spec, *extra.get(role, [])],
            env=env,
        )
        for role in roles
    ]
    pids = ", ".join(f"{r} pid {c.pid}" for r, c in zip(roles, children, strict=True))
    console.print(f"keel dev: {pids}; Ctrl-C stops them")
    console.print(f"web UI: http://127.0.0.1:{connector_port}/ui ({sign_in})")
    try:
        while all(c.poll() is None for c in children):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for c in children:
            if c.poll() is None:
                c.terminate()
        for c in children:
            c.wait(timeout=30)


#: The local dev stack's one actor: it may approve, correct and act as an operator.
DEV_ACTOR = "demo"
DEV_ROLES = ["finance-approver", "finance-lead", "invoice-clerk", "keel-operator"]


def dev_actor(home: Path) -> tuple[Path, str]:
    """``keel dev``'s actors file and its one actor's token, made once under KEEL_HOME
    (only the token's sha256 is in the actors file; the token file is 0600)."""
    import hashlib
    import secrets

    from orchestrator.config.settings import private_dir  # the command table loads no settings

    folder = private_dir(home / "dev")
    actors, token_file = folder / "actors.json", folder / f"{DEV_ACTOR}.token"
    if not token_file.exists():
        token_file.touch(mode=0o600)
        token_file.write_text(secrets.token_hex(24))
    token = token_file.read_text().strip()
    digest = hashlib.sha256(token.encode()).hexdigest()
    actors.write_text(json.dumps({DEV_ACTOR: {"token_sha256": digest, "roles": DEV_ROLES}}))
    return actors, token


def bench(
    workflows: Annotated[int, typer.Option(help="Workflows in the throughput phase.")] = 2000,
    runs: Annotated[int, typer.Option(help="Runs; each metric is the median.")] = 3,
    light: Annotated[int, typer.Option(help="Workflows in the light-load phase.")] = 100,
    light_rate: Annotated[float, typer.Option(help="Starts per second at light load.")] = 20.0,
    recovery: Annotated[
        int | None,
        typer.Option(help="Instead: N live runs, SIGKILL, restart; time to the first decision."),
    ] = None,
    finished: Annotated[
        int | None,
        typer.Option(help="Instead: N runs to their end; orchestrator RSS, then after restart."),
    ] = None,
    light_only: Annotated[
        bool, typer.Option(help="Only the light-load phases and Kafka's floor (~40 s a run).")
    ] = False,
    throughput_only: Annotated[
        bool, typer.Option(help="Only the two bursts with the projector on, with CPU per run.")
    ] = False,
    keep_topics: Annotated[
        bool,
        typer.Option(help="Keep each run's topics and Redis keys (dropped by default)."),
    ] = False,
    scale: Annotated[
        bool,
        typer.Option(
            help="Instead: 1, 2, 3 orchestrators and workers on a 3-broker cluster, 12 "
            "partitions (--workflows runs a burst), then a rolling restart under load."
        ),
    ] = False,
) -> None:
    """Measure the durable core on the real broker; the last line is one JSON object."""
    from ops.bench import run_bench
    from ops.bench_restart import run_finished, run_recovery
    from ops.local import LocalStack
    from orchestrator.config.settings import load_settings

    settings = load_settings()
    if not settings.bootstrap_servers:
        LocalStack(settings).up()
    err = new_console(stderr=True, highlight=False)
    if scale:
        from ops.bench_scale import run_scale

        result = run_scale(
            settings, lambda m: err.print(m), workflows=workflows, keep_topics=keep_topics
        )
    elif recovery is not None:
        result = run_recovery(settings, recovery, lambda m: err.print(m), keep_topics)
    elif finished is not None:
        result = run_finished(settings, finished, lambda m: err.print(m), keep_topics)
    else:
        if light_only and throughput_only:
            raise typer.BadParameter("--light-only and --throughput-only exclude each other")
        result = run_bench(
            settings,
            workflows,
            runs,
            light,
            light_rate,
            lambda m: err.print(m),
            light_only,
            throughput_only,
            keep_topics,
        )
    typer.echo(json.dumps(result))


def register(app: typer.Typer) -> None:
    """Add the tools' commands to ``keel`` (the ``keel.tools`` entry point)."""
    app.add_typer(infra_app, name="infra")
    app.command("dev")(dev)
    app.command("bench")(bench)
    app.command("demo")(demo)
    app.command("evaluate")(evaluate)
    app.add_typer(invoices_app, name="invoices")
