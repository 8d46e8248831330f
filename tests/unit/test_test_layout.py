"""Tests mirror the code: a test's layer marker comes from its directory, and only from there.

``tests/conftest.py`` marks every test under ``tests/unit`` ``unit``, under
``tests/integration`` ``integration``, under ``tests/fault`` ``fault`` and under
``tests/browser`` ``browser``; ``make test`` runs the four directories as four stages, in that
order, and ``-m`` selects the same sets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import LAYERS, TESTS, layer_of

REPO = TESTS.parent

#: A pytest plugin for the child session: what was selected (with its layer markers) and
#: what ``-m`` deselected, written as JSON to $KEEL_LAYOUT_PROBE_OUT.
PROBE = textwrap.dedent(
    """
    import json
    import os

    LAYERS = ("unit", "integration", "fault", "browser")
    DESELECTED = []


    def pytest_deselected(items):
        DESELECTED.extend(item.nodeid for item in items)


    def pytest_collection_finish(session):
        selected = {
            item.nodeid: sorted({m.name for m in item.iter_markers()} & set(LAYERS))
            for item in session.items
        }
        with open(os.environ["KEEL_LAYOUT_PROBE_OUT"], "w") as out:
            json.dump({"selected": selected, "deselected": DESELECTED}, out)
    """
)


def test_layer_of_is_the_directory_under_tests() -> None:
    assert layer_of(TESTS / "unit" / "test_codec.py") == "unit"
    assert layer_of(TESTS / "unit" / "domain" / "test_decider.py") == "unit"
    assert layer_of(TESTS / "integration" / "test_durable_core.py") == "integration"
    assert layer_of(TESTS / "fault" / "test_broker_loss.py") == "fault"
    assert layer_of(TESTS / "support.py") is None
    assert layer_of(TESTS / "histories" / "test_x.py") is None
    assert layer_of(REPO / "orchestrator" / "unit" / "test_x.py") is None


def test_every_test_has_exactly_the_marker_of_its_directory(tmp_path: Path) -> None:
    (tmp_path / "keel_layout_probe.py").write_text(PROBE)
    out = tmp_path / "collected.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    env["KEEL_LAYOUT_PROBE_OUT"] = str(out)
    selection = " or ".join(LAYERS)
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "keel_layout_probe"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-m", selection, "tests"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(out.read_text())
    # `-m "unit or integration or fault"` left nothing out: every test has a layer.
    assert found["deselected"] == []
    selected: dict[str, list[str]] = found["selected"]
    by_layer = {layer: 0 for layer in LAYERS}
    wrong = []
    for nodeid, markers in selected.items():
        layer = nodeid.split("/")[1] if nodeid.startswith("tests/") else None
        if markers != [layer]:
            wrong.append(f"{nodeid}: {markers}")
        elif layer is not None:
            by_layer[layer] += 1
    assert wrong == [], "tests whose layer markers are not their directory's:\n" + "\n".join(
        wrong[:20]
    )
    # Each stage of `make test` finds tests (pytest exits 5 on an empty stage).
    assert all(by_layer.values()), by_layer


def test_make_test_runs_the_four_stages_in_order_and_ci_runs_it_after_lint() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ntest: setup\n", 1)[1].split("\n\n", 1)[0]
    calls = [line.strip() for line in recipe.splitlines()]
    # each stage is one directory, in order; unit and integration run in parallel (a test
    # file to a worker), fault and browser one test at a time
    stages = [call.removeprefix("$(call test-stage,").rstrip(")").split(",")[0] for call in calls]
    assert stages == list(LAYERS)
    assert calls[0] == "$(call test-stage,unit,-n $(UNIT_WORKERS) --dist loadfile)"
    assert calls[2] == "$(call test-stage,fault)"
    assert calls[3] == "$(call test-stage,browser)"
    assert calls[1] == "$(call test-stage,integration,-n $(INTEGRATION_WORKERS) --dist loadfile)"
    assert all((TESTS / layer).is_dir() for layer in LAYERS)
    ci = (REPO / ".ci" / "run").read_text()
    commands = [
        line.split()[:2] for line in ci.splitlines() if line.startswith("make ") or " make " in line
    ]
    assert commands == [["make", "lint"], ["make", "test"]]


def test_the_unit_folders_mirror_the_product_packages() -> None:
    unit = TESTS / "unit"
    folders = [p for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert folders
    for folder in folders:
        assert (folder / "__init__.py").is_file(), folder
        package = REPO / "orchestrator" / folder.name
        if not package.is_dir():
            package = REPO / folder.name
        assert (package / "__init__.py").is_file(), f"{folder} mirrors no package"
