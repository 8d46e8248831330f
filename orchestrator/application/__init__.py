"""The application object and what an application declares with it: ``KeelApp`` and its
registries (``app``), per-type limits of activities (``activity_limits``), webhook
sources (``webhook_sources``) and sagas across workflows (``saga_declarations``).

An application imports these through the public face (``orchestrator``). They may import
codec, settings and the domain only, and load no I/O client (import-linter checks it).
"""
