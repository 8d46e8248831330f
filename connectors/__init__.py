"""Services that connect Keel to the outside world.

* ``keel connector`` (``service.py``): signed webhooks in (``signing.py`` verifies the
  HMAC header, ``webhooks.py`` maps a payload to a command, ``delivery.py`` produces it
  with a Redis dedupe claim and answers 202 only after Kafka's ack). See docs/connector.md.
* ``examples.py``: the bundled example application plus a demo webhook source.

The fake finance ledger of the tests and demos lives with the other stand-ins in
``ops/fakes/``.
"""
