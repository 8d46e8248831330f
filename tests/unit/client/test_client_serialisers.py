"""The client's values serialise one way (issue 45): ``as_dict()``, never ``to_json``,
``to_dict``, ``as_json`` or ``body`` beside it."""

from __future__ import annotations

import ast
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[3] / "orchestrator" / "client"
OTHER_NAMES = {"to_json", "to_dict", "as_json", "body", "json", "dict"}


def test_every_client_value_serialises_with_as_dict() -> None:
    found = [
        f"{path.name}:{node.lineno} {cls.name}.{node.name}"
        for path in sorted(CLIENT.glob("*.py"))
        for cls in ast.walk(ast.parse(path.read_text()))
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name in OTHER_NAMES
    ]
    assert found == []
