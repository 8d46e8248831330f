"""What Keel trusts and how it proves it, as pure functions: sealed fields (``sealing``,
docs/secrets.md), the tokens a human task is decided with (``human_task_tokens``) and the
proofs a decision carries to the engine (``decision_proofs``, docs/human-tasks.md).

Below the records that use them: they may import the application object, codec, settings
and the domain, and load no I/O client (import-linter checks it).
"""
