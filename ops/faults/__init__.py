"""Faults injected into Keel's own services as adapter hooks (``KEEL_ADAPTER_HOOKS``,
orchestrator/io/adapter_hooks.py): ``keel evaluate``'s seeded bug and the fault tests'
pauses. Not product: the services hold no test branch, these wrappers misbehave instead.

May import the product (the domain's state and messages, the ports it wraps); the
product never imports it.
"""
