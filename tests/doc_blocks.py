"""Every Python block of README.md and docs/*.md runs: the pages' blocks, how each declares
what it needs, and the runner that executes them (issue 46).

The conventions, one info string after ```` ```python ```` (the only markers there are):

* ```` ```python ```` -- a complete example that declares things (models, activities,
  definitions, webhooks, sagas, queries) and needs no server. It runs, in a fresh module of
  its own, in a fresh interpreter with no Kafka and no Redis (tests/unit/test_doc_blocks.py):
  building a ``KeelClient`` or opening a socket there fails the test and says to mark the
  block ``needs-stack``.
* ```` ```python needs-stack ```` -- it talks to Kafka and Redis (a ``KeelClient``:
  starting runs, schedules, queries, decisions ...). It runs in a fresh interpreter against the
  integration suite's real broker and Redis, on a topic prefix of its page's own, with an
  orchestrator and a worker running its app: the one its chain defines (``app = KeelApp(...)``
  in the blocks it continues, written to a module the services load), else the one it
  imports (``from M import app``), else ``orchestrator.examples``. That is
  tests/integration/test_doc_blocks_stack.py, unless the page is in ``OWN_TESTS`` (a test of
  its own runs those blocks and checks what they print).
* ```` ```python continued ```` -- it goes on from the page's previous Python block that runs
  (fragments in between are skipped): it runs in that block's module, after it (their chain
  needs a stack if any of them says so, e.g. ```` ```python continued needs-stack ````).
* ```` ```python file=PATH ```` -- the whole file ``PATH`` of a project the page builds
  (docs/tutorial.md: the shop of docs/tutorial/). Never run here: the page's own test
  checks each such block equals the project's file and runs the project's tests
  (tests/unit/test_tutorial.py); like a fragment it must compile and import only the face.
* ```` ```python fragment ```` -- deliberately incomplete (``...`` for what is left out, names
  defined elsewhere, an excerpt of a bundled example's source): it must compile and import only
  the public face, and is never run. Prefer a complete block; a fragment is for an excerpt.

A block that runs must also define every global name its functions use (the block or the ones
it continues, or builtins): a name used only inside a handler would fail only when the handler
runs. A failure names the page and the line (tracebacks point into the page itself).

The runner: ``python -m tests.doc_blocks PAGE [--stack] [--app M] --report FILE`` runs the
page's chains of that kind (``--app``: only the stack chains whose app is ``M``) and writes
one JSON result per chain to FILE (``chain``, ``ok``, ``error``, what it printed:
``stdout``).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import importlib
import io
import json
import re
import signal
import socket
import symtable
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = frozenset({"python", "py", "python3"})
#: The markers an info string may carry after the language.
CONTINUED, FRAGMENT, NEEDS_STACK = "continued", "fragment", "needs-stack"
MARKERS = frozenset({CONTINUED, FRAGMENT, NEEDS_STACK})
#: ``file=PATH``: the block is the file PATH of the project its page builds.
FILE_PREFIX = "file="
#: The app a stack block's services load when it imports none.
DEFAULT_APP = "orchestrator.examples"
#: Pages whose needs-stack blocks a test of their own runs (checking what they print).
OWN_TESTS = {
    "docs/client.md": "tests/integration/test_client_doc.py",
    "docs/connector.md": "tests/integration/test_connector_schemes_doc.py",
    "docs/embedding.md": "tests/integration/test_embedding_doc.py",
    "docs/schedules.md": "tests/integration/test_schedules_doc.py",
}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shown(page: Path) -> str:
    """The page as a failure names it (relative to the repository when inside it)."""
    try:
        return str(page.relative_to(ROOT))
    except ValueError:
        return str(page)


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    markers: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{shown(self.page)}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.lang in PYTHON

    @property
    def project_file(self) -> str | None:
        """``PATH`` of a ``file=PATH`` marker: a file of the project the page builds."""
        found = [m.removeprefix(FILE_PREFIX) for m in self.markers if m.startswith(FILE_PREFIX)]
        return found[0] if found else None

    @property
    def runs(self) -> bool:
        """Whether this harness runs it (not a fragment, not a project's file)."""
        return FRAGMENT not in self.markers and self.project_file is None


def snippets(page: Path) -> list[Snippet]:
    """The fenced code blocks of a page (indented ones, as in a list, dedented)."""
    found: list[Snippet] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        words = opening["info"].strip().split()
        lang = (words or [""])[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence) and lines[j].strip().strip(fence[0]) == ""
        ):
            text = lines[j]
            body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
            j += 1
        found.append(Snippet(page, i + 1, lang, "\n".join(body) + "\n", tuple(words[1:])))
        i = j + 1
    return found


@dataclass
class Chain:
    """A block that runs and the ``continued`` blocks after it: one module, in page order."""

    blocks: list[Snippet] = field(default_factory=list)

    @property
    def first(self) -> Snippet:
        return self.blocks[0]

    @property
    def needs_stack(self) -> bool:
        return any(NEEDS_STACK in b.markers for b in self.blocks)

    def __str__(self) -> str:
        return str(self.first)

    @property
    def declaring(self) -> list[Snippet]:
        """The blocks before the first needs-stack one (all of them without one)."""
        marked = [NEEDS_STACK in b.markers for b in self.blocks]
        return self.blocks[: marked.index(True)] if True in marked else self.blocks

    @property
    def defines_app(self) -> bool:
        """Whether its declaring blocks assign ``app`` themselves (``app = KeelApp(...)``)."""
        return any(
            isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(t, ast.Name) and t.id == "app"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
            for block in self.declaring
            for node in ast.parse(block.code).body
        )

    def app(self) -> str:
        """The module whose ``app`` a stack chain's services load: the page's own app
        (``doc_app_<page>_<line>``, written from the declaring blocks: ``app_source``) when
        those blocks define one, else the module it imports ``app`` from (the bundled
        examples when none)."""
        if self.needs_stack and self.defines_app:
            stem = re.sub(r"\W", "_", self.first.page.stem)
            return f"doc_app_{stem}_{self.first.line}"
        for block in self.blocks:
            for node in ast.walk(ast.parse(block.code)):
                if isinstance(node, ast.ImportFrom) and any(
                    a.name == "app" and a.asname in (None, "app") for a in node.names
                ):
                    return node.module or DEFAULT_APP
        return DEFAULT_APP

    def app_source(self) -> str:
        """The declaring blocks as one module, each at its own line of the page (so a
        traceback's line numbers are the page's)."""
        lines: list[str] = []
        for block in self.declaring:
            lines += [""] * (block.line - len(lines))
            lines += block.code.splitlines()
        return "\n".join(lines) + "\n"


def marker_errors(page: Path) -> list[str]:
    """What is wrong with the markers of a page's Python blocks (unknown words, a
    ``continued`` with nothing to continue, a fragment that would run)."""
    errors: list[str] = []
    runs = False  # a block that runs came before
    for block in (s for s in snippets(page) if s.is_python):
        unknown = [m for m in block.markers if m not in MARKERS and FILE_PREFIX not in m]
        if unknown:
            errors.append(
                f"{block}: unknown marker(s) {', '.join(unknown)} after ```{block.lang} "
                f"(known: {', '.join(sorted(MARKERS))}; tests/doc_blocks.py)"
            )
        if not block.runs and len(block.markers) > 1:
            errors.append(
                f"{block}: a fragment or a file= block never runs; it takes no other marker"
            )
        if CONTINUED in block.markers and not runs:
            errors.append(
                f"{block}: 'continued' needs a Python block before it on the page that runs "
                "(not a fragment)"
            )
        runs = runs or block.runs
    return errors


def chains(page: Path) -> list[Chain]:
    """The page's blocks that run, grouped into chains (fragments left out)."""
    found: list[Chain] = []
    for block in (s for s in snippets(page) if s.is_python):
        if not block.runs:
            continue
        if CONTINUED in block.markers and found:
            found[-1].blocks.append(block)
        else:
            found.append(Chain([block]))
    return found


def undefined_globals(code: str, namespace: dict[str, Any], offset: int = 0) -> list[str]:
    """The global names the functions (and classes) of ``code`` use that neither the
    namespace nor builtins define, each with the line of the scope using it (``offset``:
    the page's line before the code's first)."""
    table = symtable.symtable(code, "<block>", "exec")
    missing: dict[str, int] = {}

    def visit(scope: symtable.SymbolTable) -> None:
        for child in scope.get_children():
            for sym in child.get_symbols():
                name = sym.get_name()
                if (
                    sym.is_global()
                    and sym.is_referenced()
                    and not sym.is_assigned()
                    and name not in namespace
                    and not hasattr(builtins, name)
                ):
                    missing.setdefault(name, child.get_lineno())
            visit(child)

    visit(table)
    return [
        f"{name} (line {line + offset})"
        for name, line in sorted(missing.items(), key=lambda item: item[1])
    ]


def compile_error(block: Snippet) -> str | None:
    """Why the block does not compile (None: it does), with the page's line."""
    try:
        _located(block)
    except SyntaxError as exc:
        return f"{block}: not valid Python: {exc.msg} (line {exc.lineno})"
    return None


def run_page(
    page: Path,
    *,
    stack: bool,
    app: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: int = 120,
) -> list[dict[str, Any]]:
    """Run a page's chains of one kind in a fresh interpreter, from the repository (the
    pages' relative paths are the repository's): one result per chain."""
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="keel-doc-blocks-") as scratch:
        report = Path(scratch) / "report.json"
        args = [sys.executable, "-m", "tests.doc_blocks", str(page), "--report", str(report)]
        args += ["--timeout", str(timeout_s)]
        args += ["--stack"] if stack else []
        args += ["--app", app] if app else []
        if env is None:  # no servers named: what a block without needs-stack may not reach
            env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
        done = subprocess.run(
            args,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s * 4 + 60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0 or not report.exists():
            raise AssertionError(
                f"the runner failed on {shown(page)} (exit {done.returncode}): "
                f"{done.stderr[-3000:]}"
            )
        results: list[dict[str, Any]] = json.loads(report.read_text())
    return results


def failures(results: list[dict[str, Any]]) -> str:
    """The failed chains' errors, one paragraph each (empty: none failed)."""
    return "\n\n".join(r["error"] for r in results if not r["ok"])


# -- the runner (in a fresh interpreter) ------------------------------------------------


class NeedsStack(RuntimeError):
    """An unmarked block reached for a server."""


def _refuse_servers() -> None:
    """No Kafka, no Redis, no network: what a block without ``needs-stack`` reaches for
    fails with what to do."""

    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise NeedsStack(
                f"{what}: this block needs Kafka and Redis; mark it ```python needs-stack "
                "(tests/doc_blocks.py)"
            )

        return refused

    from orchestrator.client.client import KeelClient

    KeelClient.__init__ = refuse("it builds a KeelClient")  # type: ignore[method-assign]
    socket.socket.connect = refuse("it opens a connection")  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse("it opens a connection")  # type: ignore[method-assign]


def _located(block: Snippet) -> types.CodeType:
    """The block compiled so that its line numbers are the page's."""
    return compile("\n" * block.line + block.code, shown(block.page), "exec")


def run_chain(chain: Chain, timeout_s: int) -> dict[str, Any]:
    """Run one chain in a module of its own; its result (``ok``, or the failure). A stack
    chain that defines its own app goes on in the module the services load (imported from
    ``PYTHONPATH``), so both hold the same definitions."""
    module = types.ModuleType(f"doc_block_{chain.first.page.stem}_{chain.first.line}")
    module.__file__ = str(chain.first.page)
    imported = chain.declaring if chain.needs_stack and chain.defines_app else []
    result: dict[str, Any] = {"chain": str(chain), "ok": True, "error": ""}
    current = chain.first
    printed = io.StringIO()
    signal.alarm(timeout_s)
    try:
        if imported:
            with contextlib.redirect_stdout(printed):
                module = importlib.import_module(chain.app())
        sys.modules[module.__name__] = module
        for current in chain.blocks:
            if current not in imported:
                with contextlib.redirect_stdout(printed):
                    exec(_located(current), module.__dict__)
            missing = undefined_globals(current.code, module.__dict__, current.line)
            if missing:
                raise NameError(
                    f"it uses names it never defines: {', '.join(missing)}; define them, "
                    "or mark an excerpt ```python fragment"
                )
    except BaseException as exc:  # SystemExit and the alarm included
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        page_frames = [t for t in tb if shown(current.page) in t]
        result.update(
            ok=False,
            block=str(current),
            needs_stack=isinstance(exc, NeedsStack),
            error=f"{current}: {type(exc).__name__}: {exc}\n{''.join(page_frames)}".rstrip(),
            traceback="".join(tb),
        )
    finally:
        signal.alarm(0)
        sys.modules.pop(module.__name__, None)
    result["stdout"] = printed.getvalue()
    return result


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("the block did not finish in time")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.doc_blocks")
    parser.add_argument("page", type=Path)
    parser.add_argument("--stack", action="store_true", help="run the needs-stack chains")
    parser.add_argument("--app", help="only the stack chains whose app is this module")
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--timeout", type=int, default=120)
    args = parser.parse_args(argv)
    page = args.page.resolve()
    selected = [
        c
        for c in chains(page)
        if c.needs_stack == args.stack and (args.app is None or c.app() == args.app)
    ]
    if not args.stack:
        _refuse_servers()
    signal.signal(signal.SIGALRM, _alarm)
    results = []
    for chain in selected:
        results.append(run_chain(chain, args.timeout))
        sys.stdout.flush()
    args.report.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
