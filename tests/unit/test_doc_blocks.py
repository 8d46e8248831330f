"""Every Python block of the docs runs, or is a marked fragment that compiles (issue 46):
the blocks that need no server run here, each page's in a fresh interpreter with no Kafka
and no Redis; the ``needs-stack`` ones run in tests/integration/test_doc_blocks_stack.py (or
the page's own test, ``OWN_TESTS``). The conventions: tests/doc_blocks.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.doc_blocks import (
    CONTINUED,
    DEFAULT_APP,
    FRAGMENT,
    NEEDS_STACK,
    OWN_TESTS,
    ROOT,
    chains,
    compile_error,
    failures,
    marker_errors,
    pages,
    run_page,
    shown,
    snippets,
)

PAGES = pages()
BLOCKS = [s for page in PAGES for s in snippets(page) if s.is_python]
#: Pages with a block that runs without a stack.
UNIT_PAGES = [p for p in PAGES if any(not c.needs_stack for c in chains(p))]


def test_every_python_block_declares_what_it_needs_with_known_markers() -> None:
    assert [e for page in PAGES for e in marker_errors(page)] == []
    assert len(BLOCKS) >= 30


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_every_python_block_compiles(block) -> None:
    assert compile_error(block) is None


@pytest.mark.parametrize("page", UNIT_PAGES, ids=shown)
def test_the_blocks_of_a_page_run_without_servers(page: Path) -> None:
    results = run_page(page, stack=False)
    assert [r["chain"] for r in results] == [str(c) for c in chains(page) if not c.needs_stack]
    assert failures(results) == ""


def test_most_blocks_run_and_few_are_fragments() -> None:
    fragments = [s for s in BLOCKS if FRAGMENT in s.markers]
    assert len(fragments) * 4 <= len(BLOCKS), [str(s) for s in fragments]


def test_a_page_whose_stack_blocks_run_in_a_test_of_its_own_names_that_test() -> None:
    for page, test in OWN_TESTS.items():
        assert any(c.needs_stack for c in chains(ROOT / page)), page
        source = (ROOT / test).read_text()
        assert Path(page).name in source and "snippets(" in source, (page, test)


# -- the harness itself --------------------------------------------------------------


#: A page's first block (lines 1 to 5) declaring an app, for the pages below to continue.
SHOP = """\
```python
from orchestrator import KeelApp

app = KeelApp("shop")
```
"""


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "p.md"
    page.write_text(textwrap.dedent(text))
    return page


def test_a_block_that_raises_fails_with_its_page_and_line(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        # A page

        ```python
        def f() -> int:
            return 1 // 0


        f()
        ```

        ```python
        total = 1
        ```
        """,
    )
    first, second = run_page(page, stack=False)
    assert not first["ok"] and second["ok"]  # one failure does not hide the next block
    assert first["error"].startswith(f"{page}:3: ZeroDivisionError: integer division")
    # the traceback points into the page: the call at line 8, the division at line 5
    assert f'File "{page}", line 8' in first["error"]
    assert f'File "{page}", line 5, in f' in first["error"]
    assert "return 1 // 0" in first["error"]


def test_a_fragment_is_compiled_but_never_run(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        ```python fragment
        raise SystemExit("a fragment ran")
        ```

        ```python fragment
        Step("x", ...
        ```
        """,
    )
    assert chains(page) == []
    assert run_page(page, stack=False) == []
    ok, broken = snippets(page)
    assert compile_error(ok) is None
    assert compile_error(broken) == f"{page}:5: not valid Python: '(' was never closed (line 6)"


def test_a_project_file_block_is_left_to_its_pages_own_test(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        ```python file=shop/app.py
        raise SystemExit("a project's file ran")
        ```
        """,
    )
    (block,) = snippets(page)
    assert (block.project_file, block.runs) == ("shop/app.py", False)
    assert marker_errors(page) == [] and chains(page) == []
    assert run_page(page, stack=False) == []


def test_an_unmarked_block_that_needs_a_stack_says_so(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        ```python
        from orchestrator import KeelClient, load_settings
        from orchestrator.examples import app

        client = KeelClient(load_settings(), app)
        ```

        ```python
        import urllib.request

        urllib.request.urlopen("http://127.0.0.1:9/")
        ```
        """,
    )
    client, socket = run_page(page, stack=False)
    assert client["needs_stack"] and socket["needs_stack"]
    assert client["error"].startswith(
        f"{page}:1: NeedsStack: it builds a KeelClient: this block needs Kafka and Redis; "
        "mark it ```python needs-stack"
    )
    assert "it opens a connection" in socket["error"]


def test_a_continued_block_runs_in_the_previous_ones_module(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        SHOP
        + textwrap.dedent(
            """\

        ```python continued
        assert app.name == "shop"
        print(app.name)
        ```

        ```python needs-stack
        from orchestrator.examples.invoice_pipeline import app
        ```

        ```python continued
        assert "app" in globals()
        ```
        """
        ),
    )
    first, second = chains(page)
    assert [b.line for b in first.blocks] == [1, 7] and not first.needs_stack
    assert [b.line for b in second.blocks] == [12, 16] and second.needs_stack
    assert (first.app(), second.app()) == (DEFAULT_APP, "orchestrator.examples.invoice_pipeline")
    (ran,) = run_page(page, stack=False)  # the stack chain is not run without a stack
    assert ran == {"chain": f"{page}:1", "ok": True, "error": "", "stdout": "shop\n"}


def test_a_name_used_only_inside_a_function_must_be_defined(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        ```python
        import json


        def handler(order: dict) -> dict:
            return charge(json.dumps(order))
        ```
        """,
    )
    (ran,) = run_page(page, stack=False)
    assert ran["error"] == (
        f"{page}:1: NameError: it uses names it never defines: charge (line 5); define them, "
        "or mark an excerpt ```python fragment"
    )


def test_markers_are_checked(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        ```python continued
        x = 1
        ```

        ```python needs_stack
        y = 2
        ```

        ```python fragment needs-stack
        z = ...
        ```

        ```python continued
        w = y
        ```
        """,
    )
    assert marker_errors(page) == [
        f"{page}:1: '{CONTINUED}' needs a Python block before it on the page that runs "
        "(not a fragment)",
        f"{page}:5: unknown marker(s) needs_stack after ```python "
        f"(known: {CONTINUED}, {FRAGMENT}, {NEEDS_STACK}; tests/doc_blocks.py)",
        f"{page}:9: a fragment or a file= block never runs; it takes no other marker",
    ]
    # a continued block after a fragment continues the block that ran before it
    assert [[b.line for b in c.blocks] for c in chains(page)] == [[1], [5, 13]]


def test_a_stack_chain_that_defines_its_app_has_it_written_as_a_module(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        SHOP
        + textwrap.dedent(
            """\

        ```python continued
        def double(x: int) -> int:
            return 2 * x
        ```

        ```python continued needs-stack
        print(app.name)
        ```
        """
        ),
    )
    (chain,) = chains(page)
    assert chain.defines_app and [b.line for b in chain.declaring] == [1, 7]
    assert chain.app() == "doc_app_p_1"
    source = chain.app_source()
    # each block at its page line: the module's tracebacks point at the page's lines
    assert source.splitlines()[3] == 'app = KeelApp("shop")'
    assert source.splitlines()[8] == "    return 2 * x"
    assert "print" not in source
    namespace: dict = {}
    exec(compile(source, "app.py", "exec"), namespace)
    assert namespace["double"](2) == 4
