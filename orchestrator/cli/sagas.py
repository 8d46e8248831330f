"""``keel sagas``: the saga manager alone (docs/sagas.md)."""

from __future__ import annotations

from orchestrator.cli.app_spec import AppOption, app_from
from orchestrator.cli.services import _stop_on_signals


def sagas(app: AppOption = None) -> None:
    """Run the saga manager: workflow events in, commands out, exactly once."""
    from orchestrator.config.settings import load_settings
    from orchestrator.runtime.supervisor import Supervisor
    from orchestrator.sagas.manager import SagaManager
    from orchestrator.telemetry.gc_policy import configure_gc
    from orchestrator.telemetry.logs import configure_logging

    configure_logging()
    settings = load_settings()
    configure_gc(settings)
    supervised = Supervisor("sagas", SagaManager(settings, app_from(app))).start()
    _stop_on_signals(supervised)
    while supervised.state != "stopped":
        supervised.join(0.5)
