"""Checks over recorded histories: the invariants every history satisfies, and the replay
check that re-decides a history with the current code.

May import: the other rooms of the domain (``model``, ``authoring``, ``lifecycle``).
"""
