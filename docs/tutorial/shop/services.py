"""The outside world of the tutorial: a warehouse, a payment provider and a courier.

Each is an API that deduplicates by the caller's idempotency key, as Stripe's does: the
same key gets the first answer back, never a second effect. Their books are one SQLite
file (``SHOP_DB``, ``shop.db`` by default) that outlives any process, so a test can count
what really happened. Replace them with your own APIs.
"""

import json
import os
import sqlite3
import uuid
from collections.abc import Callable
from contextlib import closing
from typing import Any


def _books() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("SHOP_DB", "shop.db"), timeout=30, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, kind TEXT, body TEXT)")
    return db


def call(kind: str, key: str, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The answer recorded under ``key``, or a new one made and recorded, once."""
    with closing(_books()) as db:
        db.execute("BEGIN IMMEDIATE")
        row = db.execute("SELECT body FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            body = make()
            db.execute("INSERT INTO calls VALUES (?, ?, ?)", (key, kind, json.dumps(body)))
        else:
            body = json.loads(row[0])
        db.execute("COMMIT")
        return body


def lookup(key: str) -> dict[str, Any] | None:
    """What the call made with ``key`` answered, or None when none was made."""
    with closing(_books()) as db:
        row = db.execute("SELECT body FROM calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))


def count(kind: str) -> int:
    """How many calls of ``kind`` took effect."""
    with closing(_books()) as db:
        return int(db.execute("SELECT COUNT(*) FROM calls WHERE kind = ?", (kind,)).fetchone()[0])


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"
