"""Unit tests of orchestrator/telemetry/: metrics export and the GC policy; no broker, no
Redis."""
