"""The operator web UI served by the connector under ``/ui`` (docs/ui.md).

``routes.py`` (the pages, mounted by :func:`mount_ui`), ``sessions.py`` (sign-in with an
actor's bearer token, server-side sessions, CSRF), ``run_listing.py``, ``timeline.py``,
``task_desk.py`` and ``health_view.py`` (what each page shows); Jinja2 templates in
``templates/``, plain CSS and
JavaScript in ``static/`` (no build step). It may import what the connector may
(docs/architecture.md, layer 2), and the connector's own auth and task API.
"""

from connectors.ui.routes import mount as mount_ui

__all__ = ["mount_ui"]
