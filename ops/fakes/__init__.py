"""Fake external services for tests and demos: stand-ins with fault switches.

They are not part of Keel; they play the outside world — a finance ledger (``ledger``), a
travel booking service (``booking``), an OpenAI-compatible model server
(``openai_server``) — so tests and ``keel demo`` can check Keel's promises against the
external system's own books. ``serving`` runs any of them as a process on loopback.
They may import the domain's words and the codec; the product never imports them.
"""
