"""``keel invoices submit FILE...``: start the invoice pipeline for files on disk.

One run per distinct file, its SHA-256 the workflow id: a file submitted again (or
received through the connector's ``invoices`` source) joins the run it started
(docs/invoice-pipeline.md). ``ops/cli/tool_commands.py`` declares the command and calls
:func:`submit_files` when it runs, so ``keel`` loads this module only then.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.cli.output import LazyConsole, new_table

__all__ = ["submit_files"]

console = LazyConsole(highlight=False, emoji=False)
#: The longest file read (the pipeline's input holds at most 50,000 characters).
MAX_FILE_BYTES = 200_000


def submit_files(files: list[Path], wait: float, json_: bool) -> None:
    """Start one invoice_pipeline run per file (a file already received joins its run)."""
    from orchestrator.client.client import KeelClient
    from orchestrator.config.settings import load_settings
    from orchestrator.domain.model.errors import InvalidInputError
    from orchestrator.examples.invoice_pipeline import app
    from orchestrator.examples.invoice_pipeline.pipeline_models import submission

    bodies = []
    for path in files:  # read and check every file before sending anything
        if not path.is_file():
            raise InvalidInputError(f"{path}: no such file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InvalidInputError(f"{path}: larger than {MAX_FILE_BYTES:,} bytes")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path}: not UTF-8 text") from None
        try:
            bodies.append((path, *submission(path.name, text)))
        except ValueError as exc:
            raise InvalidInputError(f"{path}: {exc}") from None
    client = KeelClient(load_settings(), app)
    table = new_table("file", "workflow id", "run", "status")
    try:
        for path, workflow_id, body in bodies:
            started = client.start("invoice_pipeline", body, workflow_id=workflow_id)
            status = "joined" if started.existed else "started"
            if wait > 0:
                row = client.wait(workflow_id, wait, stop_on_attention=True)
                status = str((row.output or {}).get("outcome") or row.status)
            if json_:
                line = {"file": str(path), "workflow_id": workflow_id, "status": status}
                typer.echo(json.dumps(line))
            else:
                table.add_row(str(path), workflow_id[:16] + "…", started.run_id, status)
    finally:
        client.close()
    if not json_:
        console.print(table)
