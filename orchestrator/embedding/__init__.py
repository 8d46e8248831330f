"""The embedding role of the public face: Keel's processes built inside an application's own
process (docs/embedding.md), the same way the ``keel`` service commands build them.

What an application imports (``from orchestrator.embedding import ServiceParts``, like
``temporalio.worker``): ``ServiceParts`` (``service_parts``), the composition root of a
process. Names load on first use, so importing this package loads nothing but the table in
``orchestrator.application.public_face``.

Above the processes: may import the engine, the projector, the worker, the connector, the
saga manager and everything below them; below the CLI and the test kit, which build their
processes through it.
"""

from __future__ import annotations

import typing as _typing

from orchestrator.application.public_face import role_module as _role_module

__all__, __getattr__, __dir__ = _role_module("embedding", globals())


if _typing.TYPE_CHECKING:  # for type checkers; at run time names load on first use
    from orchestrator.embedding.service_parts import ServiceParts as ServiceParts
