"""The Kafka adapter: client configs (``clients``), the ports on Kafka (``adapter``, the
worker's ``outcomes``), retriable / abortable / fatal sorting (``broker_errors``), topic
provisioning (``topics``) and Java-compatible partitioning (``partitioning``).
Imports what :mod:`orchestrator.io` allows."""
