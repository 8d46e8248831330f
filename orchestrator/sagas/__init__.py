"""The sagas role of the public face, and the saga manager behind it (docs/sagas.md).

What an application imports (``from orchestrator.sagas import Saga, Emit``): ``Saga``,
the ``SagaFact`` and ``SagaView`` its ``react`` reads, ``Emit`` and the commands it emits
(``StartWorkflow``, ``SignalWorkflow``, ``CancelWorkflow``); it declares a saga with
``app.saga(...)``. Those names load on first use from the table in
``orchestrator.application.public_face``, so importing this package loads no process.

The process, one module (``manager``): sagas across workflows react to committed events
with commands; ``keel sagas`` (alone) or ``keel orchestrator`` (a supervised thread, when
the application declares any) runs :class:`~orchestrator.sagas.manager.SagaManager`.
Compensation of a single run's effects is the decider's built-in saga
(``orchestrator.domain.lifecycle.compensation``), not this.

May import the client, the I/O adapters, the runtime, telemetry, records, the application
object, codec, settings and the domain; never another process (import-linter checks it).
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("sagas", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from orchestrator.application.saga_declarations import Emit as Emit
    from orchestrator.application.saga_declarations import Saga as Saga
    from orchestrator.application.saga_declarations import SagaFact as SagaFact
    from orchestrator.application.saga_declarations import SagaView as SagaView
    from orchestrator.domain.model.messages import CancelWorkflow as CancelWorkflow
    from orchestrator.domain.model.messages import SignalWorkflow as SignalWorkflow
    from orchestrator.domain.model.messages import StartWorkflow as StartWorkflow
