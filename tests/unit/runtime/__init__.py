"""Unit tests of orchestrator/runtime: the processes' loops and adapters, on the in-memory adapter
(``runtime_support.MemoryRig``) or fakes; no broker, no Redis."""
