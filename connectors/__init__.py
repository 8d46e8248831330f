"""Services that will connect Keel to the outside world (webhook ingress, outbound adapters).

None exists yet. ``connectors.ledger`` only re-exports the fake finance ledger, which lives
with the other test and demo stand-ins in ``ops/fakes/``.
"""
