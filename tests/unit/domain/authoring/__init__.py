"""Unit tests of orchestrator/domain/authoring/: pure, no broker, no Redis."""
