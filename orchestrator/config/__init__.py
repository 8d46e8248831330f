"""Configuration: the settings every process is built from, and what keeps their secrets out of
sight.

The modules: ``settings`` (``Settings``, read once from ``KEEL_*`` variables and checked at
load, docs/configuration.md), ``project_config`` (the ``[tool.keel]`` table of a project's
pyproject.toml), ``redis_url`` (single-node and Sentinel URLs) and ``redaction`` (credentials
masked in linear time before anything is logged).

Just above the domain: may import pydantic, pydantic-settings and the domain's errors
(``ConfigError``), nothing else of Keel (import-linter's layers contract in pyproject.toml).
"""
