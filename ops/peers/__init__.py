"""Side-by-side comparisons of Keel with other workflow engines (docs/performance.md,
"Beside Restate"). Not run in CI: the peers are installed outside the repository."""
