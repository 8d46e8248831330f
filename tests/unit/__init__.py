"""Unit tests: pure and in-process, no broker and no Redis (the ``unit`` stage of ``make test``).

The folders mirror the product's packages: ``domain/`` (orchestrator/domain), ``runtime/``
(orchestrator/runtime, on the in-memory adapter), ``cli/`` (orchestrator/cli), ``handlers/``,
``connectors/`` and ``ops/``. The files directly here test orchestrator's top-level modules
(the codec, settings, the public face) and the layout of the tests themselves.
"""
