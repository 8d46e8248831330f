"""Side-by-side comparisons of Keel with other workflow engines (docs/performance.md,
"Beside Restate"). Not run in CI: the peers are installed outside the repository.

May import the product and the bench's rig (``ops.bench_rig``); the peers' own SDKs are
imported only by the processes that serve them (``restate_invoice.create_app``).
"""
