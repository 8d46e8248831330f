"""The docs teach the public face only: every Python snippet in README.md and docs/*.md
imports from ``orchestrator`` (the flat face), its role modules (``orchestrator.workflow``,
``orchestrator.activity``, ...: the table in ``orchestrator.application.public_face``), the standard
library or third-party packages, never from Keel's internals (``orchestrator.domain`` and
every other ``orchestrator.<sub>``, ``handlers``, ``connectors``, ``ops``). There is no
exemption: an operator's view of the internals is told in prose, not in a snippet.

The one other import allowed is the bundled example application (``orchestrator.examples``),
which the client pages start runs of; an application of one's own takes its place.

Every Python block also runs (tests/unit/test_doc_blocks.py, and on a real stack
tests/integration/test_doc_blocks_stack.py). Writing a page, say what a block needs after
```` ```python ```` (tests/doc_blocks.py has the details):

* nothing: a complete example that needs no server (it runs in a fresh interpreter, with
  no Kafka and no Redis) -- the default, and the one to prefer;
* ``needs-stack``: it uses a ``KeelClient`` (it runs against a real broker and Redis, with an
  orchestrator and a worker loading the app it imports);
* ``continued``: it goes on in the module of the page's previous block that runs;
* ``fragment``: a deliberate excerpt (``...``, names defined elsewhere): only compiled and
  import-checked here.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from orchestrator.application.public_face import ROLES
from tests.doc_blocks import PYTHON, Snippet, pages, snippets

PAGES = pages()

#: Keel's own top-level packages; of them only the public face may be imported.
KEEL_PACKAGES = frozenset({"orchestrator", "handlers", "connectors", "ops", "avro", "tests"})
#: The public face: the flat face and each role module.
FACE_MODULES = frozenset({"orchestrator", *(f"orchestrator.{r}" for r in ROLES if r != "app")})
#: The bundled example application, which the docs may run (never its internals' names).
EXAMPLES = re.compile(r"orchestrator\.examples(\.\w+)*")

_KEEL_IMPORT = re.compile(r"^\s*(from|import)\s+(orchestrator|handlers|connectors|ops)\b", re.M)


def python_snippets() -> list[Snippet]:
    """Blocks tagged Python, and any other block with an import of a Keel package in it."""
    return [
        s
        for page in PAGES
        for s in snippets(page)
        if s.lang in PYTHON or _KEEL_IMPORT.search(s.code)
    ]


def foreign_imports(source: str, allow: re.Pattern[str] | None = None) -> list[str]:
    """The imports in ``source`` (nested ones included) that reach past the public face,
    or ask it for a name it does not export; ``allow``: other modules that may be named."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                bad.append(f"line {node.lineno}: a relative import")
                continue
            modules = [node.module or ""]
            if node.module in FACE_MODULES:
                exported = importlib.import_module(node.module).__all__
                bad += [
                    f"line {node.lineno}: {node.module} has no public {alias.name}"
                    for alias in node.names
                    if alias.name not in exported
                ]
        else:
            continue
        for module in modules:
            if module.split(".")[0] not in KEEL_PACKAGES or module in FACE_MODULES:
                continue
            if allow is None or not allow.fullmatch(module):
                bad.append(f"line {node.lineno}: {module}")
    return bad


SNIPPETS = python_snippets()


def test_the_pages_have_python_snippets() -> None:
    assert len(SNIPPETS) >= 10
    assert {s.page.name for s in SNIPPETS} >= {"workflows.md", "sagas.md", "llm-nodes.md"}


@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_a_snippet_imports_only_the_public_face(snippet: Snippet) -> None:
    try:
        bad = foreign_imports(snippet.code, allow=EXAMPLES)
    except SyntaxError as exc:
        pytest.fail(f"{snippet}: not valid Python ({exc.msg}, line {exc.lineno})")
    assert bad == [], (
        f"{snippet} imports past the public face ({', '.join(bad)}): import from "
        "`orchestrator` or a role module (`orchestrator.workflow`, `orchestrator.activity`, ...)"
    )


def test_the_rule_tells_the_face_from_the_internals() -> None:
    assert foreign_imports("import orchestrator\nfrom orchestrator import KeelApp\n") == []
    assert foreign_imports("from orchestrator import activity, workflow\n") == []
    assert foreign_imports("from orchestrator.workflow import State, Step\n") == []
    assert foreign_imports("import orchestrator.client\n") == []
    assert foreign_imports("from pydantic import BaseModel\nimport hashlib\n") == []
    assert foreign_imports("from orchestrator.domain import State\n") == [
        "line 1: orchestrator.domain"
    ]
    assert foreign_imports("def f():\n    import handlers.llm\n") == ["line 2: handlers.llm"]
    assert foreign_imports("from connectors.webhooks import Signal\n") != []
    assert foreign_imports("from ops.local import LocalStack\n") != []
    assert foreign_imports("from . import x\n") != []
    assert foreign_imports("from orchestrator import Decider\n") == [
        "line 1: orchestrator has no public Decider"
    ]
    # a name of another role, and an old name kept only for compatibility
    assert foreign_imports("from orchestrator.activity import State\n") == [
        "line 1: orchestrator.activity has no public State"
    ]
    assert foreign_imports("from orchestrator import Signal\n") == [
        "line 1: orchestrator has no public Signal"
    ]
    # the client's modules are internals; its role face is not
    assert foreign_imports("from orchestrator.client.client import KeelClient\n") == [
        "line 1: orchestrator.client.client"
    ]
    # the bundled example app only where allowed, and never a marker's exemption
    example = "from orchestrator.examples.invoice_pipeline import app\n"
    assert foreign_imports(example, allow=EXAMPLES) == []
    assert foreign_imports(example) == ["line 1: orchestrator.examples.invoice_pipeline"]
    internal = "# keel-internal\nfrom orchestrator.domain import Decider\n"
    assert foreign_imports(internal, allow=EXAMPLES) == ["line 2: orchestrator.domain"]


def test_a_snippet_inside_a_list_item_is_found(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("1. step\n\n   ```python\n   from handlers.llm import llm_step\n   ```\n")
    (found,) = snippets(page)
    assert found.lang == "python"
    assert foreign_imports(found.code) == ["line 1: handlers.llm"]
