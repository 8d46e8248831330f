"""Unit tests of orchestrator/trust/: sealed fields, human-task tokens and decision proofs; no
broker, no Redis."""
