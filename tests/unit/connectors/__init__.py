"""Unit tests of connectors: webhooks and the human-task API's pure parts."""
