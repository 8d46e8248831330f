"""The tutorial's shop (docs/tutorial.md): ``app`` with every workflow, activity and
webhook source registered, as ``[tool.keel] app = "shop:app"`` names it."""

from shop import activities, webhooks, workflows
from shop.app import app

__all__ = ["activities", "app", "webhooks", "workflows"]
