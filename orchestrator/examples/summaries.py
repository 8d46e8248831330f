"""A rate-limited fan-out (docs/limits.md, "Per-type limits"): documents summarized by
a provider that allows 3 calls a second, whatever the workers could do at once.

``summaries_batch`` v1 maps ``summarize_document`` over its documents with no
``max_concurrency`` of its own; the activity type declares ``rate_limit="3/s"``, which
every worker enforces together through Redis. A task over the limit is reported
``throttled`` and dispatched again after the wait the limiter names, spending no retry:
its history shows the throttled attempts beside the ones that ran. The summary itself is
computed here (the document's first words and its length), so the example needs no
provider to run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import Context, RetryPolicy, State, Step, WorkflowDefinition
from orchestrator.examples.registry import app

#: Calls the provider takes per second, across every worker.
PROVIDER_RATE = "3/s"


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    text: str = Field(max_length=10_000)


class Summary(BaseModel):
    title: str
    words: int
    opening: str


class Documents(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[Document] = Field(max_length=1000)


@app.activity("summarize_document", input=Document, output=Summary, rate_limit=PROVIDER_RATE)
def summarize_document(doc: Document) -> Summary:
    words = doc.text.split()
    return Summary(title=doc.title, words=len(words), opening=" ".join(words[:8]))


def _documents(ctx: Context[Documents]) -> list[dict[str, Any]]:
    return [d.model_dump() for d in ctx.input.documents]


summaries_batch = app.workflow(
    WorkflowDefinition(
        "summaries_batch",
        1,
        Documents,
        [
            State(
                "summarize",
                steps=[
                    Step(
                        "summarize",
                        summarize_document,
                        for_each=_documents,
                        retry=RetryPolicy(max_attempts=3, initial_interval_ms=100),
                    )
                ],
                complete=lambda ctx: {"summaries": ctx.results["summarize"]},
            )
        ],
        description="Summarize documents through a provider limited to 3 calls a second.",
    )
)
