"""Unit tests: pure and in-process, no broker and no Redis (the ``unit`` stage of ``make test``).

The folders mirror the product's packages: ``domain/``, ``engine/``, ``projector/``,
``client/``, ``io/``, ``records/``, ``trust/``, ``telemetry/`` and ``runtime/`` (each the
orchestrator package of that name, on the in-memory adapter where it needs one), ``cli/``,
``handlers/``, ``connectors/`` and ``ops/``. The files directly here test orchestrator's
top-level modules (the codec, settings, the application object, the public face) and the
layout of the tests themselves.
"""
