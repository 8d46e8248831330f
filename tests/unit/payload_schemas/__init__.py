"""Unit tests of orchestrator/payload_schemas/: models as Avro records, the published files,
typed payloads in the envelope; no broker, no Redis."""
