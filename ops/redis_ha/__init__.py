"""Local Redis groups that fail over, from Debian's ``redis-server``: a Sentinel group
(``redis_sentinel``: a master, replicas and sentinels) and a Redis Cluster
(``redis_cluster``: masters with replicas), for the fault tests and docs/operations.md.

Tooling, outside the product's layers: may import the standard library and ``ops.local``.
"""
