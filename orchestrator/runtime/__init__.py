"""Kafka and Redis runtime: orchestrator loop, worker plumbing, projections, client."""
