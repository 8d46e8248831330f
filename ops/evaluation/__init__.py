"""``keel evaluate``: a workflow run under each fault class, judged from its histories and
the fakes' own books (docs/evaluation.md). Tooling: the product never imports it."""
