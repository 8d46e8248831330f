"""Unit tests of orchestrator/projector/, on the in-memory adapter (``tests.unit.memory_rig``) or fakes;
no broker, no Redis."""
