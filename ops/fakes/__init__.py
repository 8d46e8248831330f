"""Fake external services for tests and demos: stand-ins with fault switches.

They are not part of Keel; they play the outside world (a finance ledger) so tests and
``keel demo`` can check Keel's promises against the external system's own books.
"""
