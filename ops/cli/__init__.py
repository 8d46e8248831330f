"""The ``keel`` commands the ops tooling adds (``demo``, ``bench``, ``evaluate``, ...),
registered through the ``keel.tools`` entry point.

The top of the ops tooling: may import every other ops module and the product; nothing in
ops imports it.
"""
