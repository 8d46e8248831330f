"""Committed events handed from the engine to a projector without a round trip through
Kafka: in the same process (``committed_channel``) or to a child process through a pipe
(``committed_pipe``). ``<prefix>.events`` stays the source of truth; a hand-off only saves
the read-back (docs/architecture.md).

An I/O adapter like ``kafka/`` and ``redis/``: it may import the ports, records, codec,
settings and the domain; never a process or the client.
"""
