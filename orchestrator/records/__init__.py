"""What Keel's records look like, as pure functions: the one envelope factory
(``envelopes``), JSON on the hot path (``fast_json``), the read model's rows
(``read_model_rows``), the history lines a row carries (``history_entries``) and the LLM usage
they add up to (``llm_usage``).

Every process and adapter shares them, so they sit below the adapters: they may import
``orchestrator.trust``, codec, settings and the domain, and load no I/O client
(import-linter checks it).
"""
