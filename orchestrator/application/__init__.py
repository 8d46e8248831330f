"""The application object and what an application declares with it: ``KeelApp`` and its
registries (``app``), per-type limits of activities (``activity_limits``), webhook
sources (``webhook_sources``), sagas across workflows (``saga_declarations``) and the
driver whose rules answer waiting runs for ``keel evaluate`` (``driver_rules``).

An application imports these through the public face (``orchestrator``). They may import
codec, settings and the domain only, and load no I/O client (import-linter checks it).
"""
