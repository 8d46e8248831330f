"""The connector's composition: the aiohttp application that serves webhooks, human-task
decisions and the web UI, built from Settings (``service``).

The top of the connector: may import the connector's parts (webhooks, schemes, the task
API, the UI, delivery), the client, the I/O adapters, telemetry, records, trust, codec and
settings; nothing in connectors imports it.
"""
