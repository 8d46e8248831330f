"""Unit tests of orchestrator/runtime/: the helpers every process shares (envelopes, JSON,
sealing, tokens and proofs, metrics, GC policy); no broker, no Redis."""
