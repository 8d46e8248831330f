"""Unit tests of orchestrator/client/, on the in-memory adapter (``tests.unit.memory_rig``) or fakes;
no broker, no Redis."""
