"""Unit tests of orchestrator/cli: the ``keel`` command (usage, lazy imports, service health)."""
