"""The layers load what they say: a unit test's adapter and an application's authoring code
pull in no I/O client (docs/architecture.md, "The module map"; the import contracts in
pyproject.toml, checked by ``lint-imports``, say what each layer may import).

Each check imports the modules in a fresh interpreter and reads ``sys.modules``, so
what another test loaded cannot hide an import.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.application.public_face import ROLES

ROOT = Path(__file__).resolve().parents[2]

#: The clients of Kafka, Redis and HTTP, and the OpenTelemetry SDK.
IO_CLIENTS = ("confluent_kafka", "redis", "aiohttp", "opentelemetry")


def _loaded_after_importing(*modules: str) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout))


def _clients(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.split(".")[0] in IO_CLIENTS)


def test_the_in_memory_adapter_loads_neither_kafka_nor_redis() -> None:
    loaded = _loaded_after_importing("orchestrator.io.memory")
    assert "orchestrator.io.memory" in loaded
    assert _clients(loaded) == []


def test_the_in_memory_adapter_refuses_a_large_record_in_the_clients_words() -> None:
    from confluent_kafka import KafkaError

    from orchestrator.io.memory import MSG_SIZE_TOO_LARGE

    assert str(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)) == MSG_SIZE_TOO_LARGE


#: The errors an adapter raises through the ports, each defined once, beside the ports.
PORT_ERRORS = (
    "BrokerErrorKind",
    "CallStalled",
    "EpochChanged",
    "ProducerReset",
    "RebuildRunning",
    "SeqConflict",
    "Stopping",
    "TxnAbortable",
)


def test_the_port_errors_are_defined_once_beside_the_ports() -> None:
    from orchestrator.io import ports

    defined = {
        (node.name, str(path.relative_to(ROOT)))
        for path in _product_modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name in PORT_ERRORS
    }
    assert defined == {(name, "orchestrator/io/ports.py") for name in PORT_ERRORS}
    assert all(getattr(ports, name).__module__ == "orchestrator.io.ports" for name in PORT_ERRORS)


@pytest.mark.parametrize(
    "module",
    [
        "orchestrator.io.ports",
        "orchestrator.io.partitioning",
        "orchestrator.records.history_entries",
    ],
)
def test_a_port_or_a_pure_helper_loads_no_client(module: str) -> None:
    assert _clients(_loaded_after_importing(module)) == []


#: What an application's own modules import to declare workflows, activities and sagas.
AUTHORING = (
    "orchestrator.domain",
    "orchestrator.application.app",
    "orchestrator.application.webhook_sources",
    "orchestrator.application.saga_declarations",
    "orchestrator.payload_schemas.codec",
    "orchestrator.config.settings",
    "handlers.sdk.activity_context",
    "handlers.sdk.activity_errors",
    "handlers.sdk.markers",
)


def test_authoring_loads_no_io_client() -> None:
    assert _clients(_loaded_after_importing(*AUTHORING)) == []


def test_every_authoring_name_of_the_public_face_loads_no_io_client() -> None:
    """Every name but the client's (I/O by nature: Kafka out, Redis read back; an
    application names it where it starts, signals or queries runs, not where it declares
    them), the embedding's (it builds the processes, where a process starts) and the test
    kit's (it runs the engine and the worker; a test names it, never an application), from
    its role module: the LLM steps included, declaring one loads neither the
    HTTP provider nor the Redis record of model calls (the worker loads those when it runs
    one)."""
    code = (
        "import importlib, json, sys, warnings\n"
        "from orchestrator.application.public_face import FACE\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "for row in FACE:\n"
        "    if row.role not in ('client', 'embedding', 'testing'):\n"
        "        where = 'orchestrator' if row.role == 'app' else f'orchestrator.{row.role}'\n"
        "        getattr(importlib.import_module(where), row.name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    assert _clients(set(json.loads(done.stdout))) == []


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one node that reach each other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    nodes = set(edges) | {n for targets in edges.values() for n in targets}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(nodes):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def _import_graph() -> dict[str, set[str]]:
    """Every module of Keel and the modules of Keel it imports, imports inside functions and
    under ``TYPE_CHECKING`` included."""
    import grimp

    graph = grimp.build_graph("orchestrator", "handlers", "connectors", "ops", cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _folder(module: str) -> str:
    """The folder a module sits in: a package for its ``__init__``, else its parent package."""
    if (ROOT / module.replace(".", "/")).is_dir():
        return module
    return module.rpartition(".")[0]


def test_no_module_imports_itself_through_others() -> None:
    assert _strongly_connected(_import_graph()) == []


def test_no_folder_imports_itself_through_others() -> None:
    """A folder is a room (docs/architecture.md, "The layers"): the rooms form a hierarchy, so
    no folder's module may reach, through other folders, a module of its own folder (the
    top-level face modules and settings once sat beside ``__main__``, and made one)."""
    folders: dict[str, set[str]] = {}
    for module, imported in _import_graph().items():
        here = _folder(module)
        folders.setdefault(here, set()).update(
            there for there in map(_folder, imported) if there != here
        )
    assert _strongly_connected(folders) == []


PACKAGES = ("orchestrator", "handlers", "connectors", "ops")


def _product_modules() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    ]


#: The role modules of the public face (``orchestrator/workflow.py``, ``errors.py``, ...) are
#: named for their role, like ``temporalio.workflow``: each may share the name of a module
#: it fronts (``orchestrator/domain/model/errors.py``) or of a command (``cli/workflow.py``).
ROLE_MODULES = frozenset(ROOT / "orchestrator" / f"{role}.py" for role in ROLES)


def test_no_two_modules_share_a_name() -> None:
    seen: dict[str, list[str]] = {}
    for path in _product_modules():
        if path.name not in ("__init__.py", "__main__.py") and path not in ROLE_MODULES:
            seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_no_folder_holds_more_than_fifteen_modules() -> None:
    folders: dict[Path, int] = {}
    for path in _product_modules():
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(f.relative_to(ROOT)): n for f, n in folders.items() if n > 15}
    assert crowded == {}


def test_every_room_says_what_it_may_import() -> None:
    silent = []
    for path in _product_modules():
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            if "import" not in doc.lower():
                silent.append(str(path.relative_to(ROOT)))
    assert silent == []


def test_the_architecture_pages_room_table_counts_every_folders_modules() -> None:
    """docs/architecture.md's table of rooms says how many modules each folder holds (a
    bare number: the folder's own; after a backticked ``sub/``: that subfolder's); the
    counts are the tree's (issue 45: the page's counts had drifted)."""
    import re

    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = page.index("| folder | layer | room | modules |")
    rows = page[start : page.index("\n\n", start)].splitlines()[2:]
    wrong = {}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        folder = ROOT / re.match(r"`([^`]+)`", cells[0]).group(1)  # type: ignore[union-attr]
        for sub, said in re.findall(r"(?:`([\w]+)/`\s*)?(\d+)", cells[-1]):
            where = folder / sub if sub else folder
            found = len([p for p in where.glob("*.py") if p.name != "__init__.py"])
            if int(said) != found:
                wrong[str(where.relative_to(ROOT))] = (int(said), found)
    assert wrong == {}
