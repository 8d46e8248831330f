"""The connector process: Keel's HTTP edge.

* ``keel connector`` (``service.py``): signed webhooks in (``signing.py`` verifies the
  HMAC header, ``schemes/`` one verifier per signature scheme (GitHub, Stripe, Slack,
  Standard Webhooks), ``webhooks.py`` maps a payload to a command, ``delivery.py`` produces it
  with a Redis dedupe claim and answers 202 only after Kafka's ack), and the human-task
  inbox and decisions (``human_task_api.py``, ``auth.py``); every answer is standard JSON
  and every body is read within the read timeout (``json_answers.py``). See docs/connector.md.
* ``examples.py``: the bundled example application plus a demo webhook source (an
  example: it may import ``orchestrator.examples``; nothing in the product imports it).

May import: the client, the I/O adapters (only ``delivery`` imports the Kafka and Redis
clients), the runtime helpers, the application object and the domain; never another
process. The fake finance ledger of the tests and demos lives with the other stand-ins in
``ops/fakes/``.
"""
