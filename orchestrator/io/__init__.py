"""Ports and adapters: the seam between Keel's processes and Kafka, Redis or memory.

``ports`` names what a process needs (event log, command intake, outcome sink, read model,
and the errors an adapter raises through them); ``kafka/`` and ``redis/`` implement them on
the real servers, ``memory`` in memory for unit tests of the runtime. Only these modules
import confluent_kafka and redis (import-linter checks it). They may import the ports,
``orchestrator.records`` and ``orchestrator.trust``, the application object, codec, settings and the
domain; never a process (engine, projector, worker, connector, saga manager) or the client.
"""
