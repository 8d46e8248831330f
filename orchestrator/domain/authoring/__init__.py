"""What an application declares: versioned workflow definitions, their steps, waits,
policies, upcasters and migrations, and the read-only view of a run their functions get.

May import: ``orchestrator.domain.model``, the standard library and pydantic.
"""
