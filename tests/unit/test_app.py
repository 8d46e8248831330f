"""KeelApp keeps every registry as a field of its own, and ``include`` merges applications."""

from __future__ import annotations

import pytest

from orchestrator.application.app import AppError, KeelApp
from orchestrator.application.saga_declarations import Saga, sagas_of
from orchestrator.application.webhook_sources import WebhookSignal
from orchestrator.domain.model.errors import DefinitionError


def _app(name: str) -> KeelApp:
    app = KeelApp(name)

    @app.activity(f"{name}.work")
    def work(payload: dict) -> dict:
        return payload

    app.declare_activity(f"{name}.remote")
    app.webhook(
        f"{name}-hook",
        secret_env="HOOK_SECRETS",
        event_id=lambda body: body["id"],
        route=lambda body: WebhookSignal(body["wf"], "go"),
    )
    app.saga(
        Saga(f"{name}-saga", {"wf": ["WorkflowCompleted"]}, lambda *_: None, lambda *_: []),
    )
    app.llm_nodes[f"{name}.llm"] = {"digest": ("node", "runner")}
    return app


def test_registries_are_declared_fields() -> None:
    app = KeelApp()
    assert (app.webhooks, app.sagas, app.llm_nodes) == ({}, {}, {})
    assert sagas_of(app) is app.sagas
    assert not {"_webhooks", "_sagas", "_llm_nodes"} & set(vars(app))


def test_include_takes_in_every_registration() -> None:
    a, b = _app("a"), _app("b")
    both = KeelApp("both")
    assert both.include(a).include(b) is both
    assert set(both.handlers) == {"a.work", "b.work"}
    assert both.external_activities == {"a.remote", "b.remote"}
    assert set(both.webhooks) == {"a-hook", "b-hook"}
    assert set(both.sagas) == {"a-saga", "b-saga"}
    assert both.llm_nodes["b.llm"] is b.llm_nodes["b.llm"]
    both.include(a)  # the same registrations again: nothing changes
    assert set(both.handlers) == {"a.work", "b.work"}


def test_include_refuses_a_name_registered_otherwise() -> None:
    a, other = _app("a"), _app("a")  # same names, other functions and objects
    with pytest.raises(AppError, match=r"activity 'a\.work' is already registered otherwise"):
        KeelApp().include(a).include(other)
    assert issubclass(AppError, DefinitionError)


def test_a_saga_is_declared_once_by_name() -> None:
    app = KeelApp()
    saga = Saga("s", {"wf": ["WorkflowCompleted"]}, lambda *_: None, lambda *_: [])
    assert app.saga(saga) is saga
    assert app.saga(saga) is saga  # the same declaration again is harmless
    other = Saga("s", {"wf": ["WorkflowFailed"]}, lambda *_: None, lambda *_: [])
    with pytest.raises(DefinitionError, match="saga 's' is already declared"):
        app.saga(other)
    assert app.sagas == {"s": saga}
