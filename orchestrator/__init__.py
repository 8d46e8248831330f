"""Keel: a durable, event-sourced workflow orchestrator on Apache Kafka."""
