"""Durable schedules (docs/schedules.md): a schedule is a run of the built-in workflow
``keel.schedule``, so its state is event-sourced, replay-checked and decided exactly once
like any run's.

``spec`` holds what a schedule is (its timing, target, overlap policy and catch-up
window) and the fire times, ``planning`` what one tick does (pure: the clock and the
previous run's status come in as arguments), ``definition`` the built-in workflow.
This room sits just below the client: it imports the application object, the domain,
pydantic and croniter, never an I/O client; the client starts a schedule's runs.
"""
