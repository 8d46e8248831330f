"""Kafka and Redis runtime: orchestrator loop, worker plumbing, projections, client.

Its modules sit in several layers (the processes, their parts, the client, the I/O
adapters, the ports): docs/architecture.md, "The layers", names each module's, and
``lint-imports`` (the contracts in pyproject.toml) checks what each may import.
"""
