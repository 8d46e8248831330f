"""Unit tests of orchestrator/domain: the pure model (decider, evolve, replay, invariants, upcasting)."""
