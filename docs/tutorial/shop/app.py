"""The application object: every Keel process of the shop loads it (``[tool.keel] app``)."""

from orchestrator import KeelApp

app = KeelApp("shop")
