"""The docs' ``needs-stack`` Python blocks run as a user runs them (issue 46): in a fresh
interpreter, on the test's broker and Redis and a topic prefix of their own, with an
orchestrator and a worker running the app they import. One test per page and app (a page
whose blocks use two apps, like the invoice pipeline's, gets a prefix for each); pages with
a test of their own (``OWN_TESTS``) are run there. The conventions: tests/doc_blocks.py."""

from __future__ import annotations

import ast
import os
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from tests.doc_blocks import OWN_TESTS, chains, failures, pages, run_page, shown

#: (page, app) for every page with a needs-stack chain that no test of its own runs.
STACK_PAGES = [
    (page, app)
    for page in pages()
    if shown(page) not in OWN_TESTS
    for app in sorted({c.app() for c in chains(page) if c.needs_stack})
]


@contextmanager
def _nothing(services) -> Iterator[None]:
    yield


@contextmanager
def _invoice_fakes(services) -> Iterator[None]:
    """What docs/invoice-pipeline.md starts before its blocks: the fake ledger and accounts
    payable, and the OpenAI fake playing the scripted model (the agent's answers first)."""
    from ops.fakes import serving
    from ops.fakes.openai_server import running as model_running
    from ops.invoices.agent_script import both_scripts
    from ops.invoices.invoice_samples import samples

    with (
        serving.running("ops.fakes.ledger", "ledger") as ledger_url,
        serving.running("ops.fakes.payables", "payables") as payables_url,
        model_running() as model,
    ):
        model.script(both_scripts(samples()))
        services.env.update(
            KEEL_LLM_BASE_URL=model.api_root,
            KEEL_LEDGER_URL=ledger_url,
            KEEL_PAYABLES_URL=payables_url,
        )
        yield


#: What a page's blocks need besides the stack (the page says it in prose or a bash block).
PAGE_SETUP: dict[str, Callable[..., AbstractContextManager[None]]] = {
    "docs/invoice-pipeline.md": _invoice_fakes,
}


def _terminated(printed: str) -> None:
    assert printed == "terminated\n"  # what the page's comment shows


def _counts(printed: str) -> None:
    from orchestrator import WorkflowStatus

    # a fresh prefix: no run matches, and every status counts 0, by its plain name
    assert printed == f"{dict.fromkeys(map(str, WorkflowStatus), 0)}\n"
    assert printed.startswith("{'running': 0, 'waiting': 0, 'needs_attention': 0, ")


def _posted(printed: str) -> None:
    # the sample invoice the page submits is posted (by the pipeline or by the agent)
    output = ast.literal_eval(printed)
    assert (output["file_name"], output["outcome"]) == ("inv-2026-0001-auto.txt", "posted")


#: What a page's blocks print, checked where the page tells it.
PRINTED: dict[str, Callable[[str], None]] = {
    "docs/workflows.md": _terminated,
    "docs/run-search.md": _counts,
    "docs/invoice-pipeline.md": _posted,
}


def test_every_stack_page_is_run_here_or_by_its_own_test() -> None:
    stack_pages = {shown(p) for p in pages() if any(c.needs_stack for c in chains(p))}
    assert stack_pages == {shown(p) for p, _ in STACK_PAGES} | set(OWN_TESTS)
    assert {"docs/workflows.md", "docs/run-search.md"} <= stack_pages
    assert set(PAGE_SETUP) | set(PRINTED) <= stack_pages


def run_stack_page(page: Path, app: str, services, folder: Path) -> list[dict]:
    """Start an orchestrator and a worker on ``app`` (a page's own app written to
    ``folder`` first), run the page's stack chains of that app; their results."""
    own = [c for c in chains(page) if c.needs_stack and c.app() == app and c.defines_app]
    if own:
        (folder / f"{app}.py").write_text(own[0].app_source())
        path = services.env.get("PYTHONPATH")
        services.env["PYTHONPATH"] = os.pathsep.join([str(folder), *([path] if path else [])])
    services.start("orchestrator", "--app", f"{app}:app")
    services.start("worker", "--app", f"{app}:app")
    return run_page(page, stack=True, app=app, env=dict(services.env))


def _assert_ran(page: Path, app: str, results: list[dict], services) -> None:
    expected = [str(c) for c in chains(page) if c.needs_stack and c.app() == app]
    assert [r["chain"] for r in results] == expected
    errors = failures(results)
    logs = "\n".join(f"{p.log_path.name}: {p.log_path.read_text()[-1500:]}" for p in services.procs)
    assert errors == "", f"{errors}\n\nthe services' logs (their ends):\n{logs}"


@pytest.mark.parametrize(
    ("page", "app"), STACK_PAGES, ids=[f"{shown(p)}[{a}]" for p, a in STACK_PAGES]
)
def test_the_stack_blocks_of_a_page_run(page: Path, app: str, services, tmp_path) -> None:
    with PAGE_SETUP.get(shown(page), _nothing)(services):
        results = run_stack_page(page, app, services, tmp_path)
    _assert_ran(page, app, results, services)
    PRINTED.get(shown(page), lambda printed: None)("".join(r["stdout"] for r in results))


def test_a_page_that_defines_its_own_app_runs_it_on_the_stack(services, tmp_path) -> None:
    page = tmp_path / "own.md"
    page.write_text(
        textwrap.dedent(
            """\
            ```python
            from pydantic import BaseModel

            from orchestrator import KeelApp, State, Step, WorkflowDefinition

            app = KeelApp("greeter")


            class Name(BaseModel):
                name: str


            @app.activity("greet", input=Name)
            def greet(who: Name) -> dict:
                return {"greeting": f"hello {who.name}"}


            app.workflow(
                WorkflowDefinition(
                    "greeting",
                    1,
                    Name,
                    [State("greet", steps=[Step("greet", "greet")], complete=lambda ctx: ctx.results["greet"])],
                )
            )
            ```

            ```python continued needs-stack
            from orchestrator import KeelClient, load_settings

            client = KeelClient(load_settings(), app)
            client.start("greeting", {"name": "Ada"}, workflow_id="greet-1")
            print(client.wait("greet-1", 60).output)
            client.close()
            ```
            """
        )
    )
    (chain,) = chains(page)
    app = chain.app()
    assert app == "doc_app_own_1" and chain.defines_app
    (ran,) = run_stack_page(page, app, services, tmp_path)
    _assert_ran(page, app, [ran], services)
    assert ran["stdout"] == "{'greeting': 'hello Ada'}\n"
