"""Unit tests of orchestrator/records/: envelopes, hot-path JSON, read-model rows and the LLM
usage they add up to; no broker, no Redis."""
