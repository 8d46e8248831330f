"""Unit tests of handlers: the worker side (activity execution, effects, LLM steps)."""
