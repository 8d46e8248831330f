"""Services every Keel process shares, none of them a process or an adapter: the one
envelope factory (``envelopes``), JSON on the hot path (``fast_json``), sealed fields
(``sealing``), human-task tokens and decision proofs (``human_task_tokens``,
``decision_proofs``), telemetry and logs (``metrics``, ``tracing``, ``logs``,
``gc_policy``), the status file and supervised threads (``health``, ``supervisor``).

The processes live beside it: ``orchestrator.engine``, ``orchestrator.projector``,
``handlers`` (the worker), ``connectors``, ``orchestrator.sagas``; the client in
``orchestrator.client``; ports and adapters in ``orchestrator.io``. docs/architecture.md,
"The layers", says what each may import, and ``lint-imports`` checks it.
"""
