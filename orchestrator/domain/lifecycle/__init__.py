"""The aggregate's rules: events from commands (``command_handlers``), state from events
(``evolve``), the lifecycles of activities, signals, human tasks, compensation and runs of
a missing version, and the ``Decider`` facade the engine uses.

May import: ``orchestrator.domain.model`` and ``orchestrator.domain.authoring``.
"""
