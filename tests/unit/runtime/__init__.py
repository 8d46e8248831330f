"""Unit tests of orchestrator/runtime/: the status file and supervised threads every process
runs on; no broker, no Redis."""
