"""A test application with sensitive fields (docs/secrets.md).

``sealed_call`` takes an ``api_key`` declared ``Sensitive[str]``; its activity reports the
sha256 of the key it received (so a test can tell it got the clear value) and echoes the
key back in a sensitive output field (which the worker must seal before reporting).
Run with ``--app tests.integration.sealed_app:app``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel

from orchestrator import Context, KeelApp, Sensitive, Step, WorkflowDefinition, side_effect

APP = "tests.integration.sealed_app:app"

app = KeelApp("keel-sealed-tests")


class Call(BaseModel):
    name: str
    api_key: Sensitive[str]


class Used(BaseModel):
    name: str
    key_sha256: str
    echo: Sensitive[str]


@app.activity("use_key", input=Call, output=Used)
@side_effect
def use_key(call: Call) -> dict[str, Any]:
    assert isinstance(call.api_key, str), "the handler must get the clear value"
    digest = hashlib.sha256(call.api_key.encode()).hexdigest()
    return {"name": call.name, "key_sha256": digest, "echo": call.api_key}


def _output(ctx: Context) -> Any:
    return ctx.results["call"]


sealed_call = app.workflow(
    WorkflowDefinition.dag(
        "sealed_call",
        1,
        Call,
        [Step("call", "use_key")],
        output=_output,
        description="Calls an API with a sensitive key.",
    )
)
