"""Tools around the product, never part of it: the local Kafka and Redis stack, the
benchmarks, the demo (the README's main job), fault-test clusters and corpus recorders.

May import anything in the product; nothing in the product imports it (the ``tools-out``
contract), except the CLI, which is the tools' face (``keel infra``, ``dev``, ``bench``,
``demo``).
"""
