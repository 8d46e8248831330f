"""Re-export of the fake ledger, which moved to ``ops/fakes/ledger.py``.

Kept so existing imports and ``python -m connectors.ledger`` keep working.
"""

from __future__ import annotations

import sys

from ops.fakes.ledger import (
    IDEMPOTENCY_HEADER,
    STATE,
    Faults,
    LedgerClient,
    LedgerState,
    create_app,
    main,
    parse_faults,
    serve,
)

__all__ = [
    "IDEMPOTENCY_HEADER",
    "STATE",
    "Faults",
    "LedgerClient",
    "LedgerState",
    "create_app",
    "main",
    "parse_faults",
    "serve",
]

if __name__ == "__main__":
    sys.exit(main())
