"""The SDK an application writes activity handlers with: ``activity_context`` (``activity()``,
heartbeats), ``activity_errors`` (the failure classes) and ``markers`` (``@side_effect``).

An application imports them through the public face, ``orchestrator.activity``
(``activity.context()`` is ``activity_context.activity()``). They may import the
application object, codec, settings and the domain, and load no I/O client (import-linter
checks it).
"""
