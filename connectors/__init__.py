"""aiohttp services: webhook ingress, human tasks, outbound adapters."""
