"""What every process reports about itself: counters and histograms (``metrics``),
OpenTelemetry traces (``tracing``), structured logs (``logs``) and the garbage-collector
policy of a long-lived process (``gc_policy``).

An adapter layer (to OpenTelemetry and the log sinks): it may import ``orchestrator.records``,
``orchestrator.trust``, codec, settings and the domain; never a process or the client
(import-linter checks it).
"""
