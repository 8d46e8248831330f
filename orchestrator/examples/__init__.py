"""The bundled example application (the default of every ``--app``).

Handlers are pure, deterministic and fast so that demos, tests and benchmarks measure
Keel, not the work:

* ``document_review`` v1: review -> approved | rejected | needs_documents, where
  needs_documents waits (7 days at most) for signal ``documents_added`` and loops back
  to review. The reviewer rejects any text containing "fraud" and approves once the
  original document plus the added ones number at least 3. Query ``progress`` tells the
  run's state and the documents it has (``keel workflow query ID progress``).
* ``parallel_checks`` v1: three parallel checks, a join, then a combining step.
* ``three_step`` v1: three sequential trivial activities (the benchmark workflow).
* ``timer_demo`` v1: one durable timer of ``seconds`` from the input, then completes.

An application like any user's: imports only the public face (``orchestrator``); nothing
in the product imports it (the ``tools-out`` contract).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import (
    Context,
    Query,
    QueryContext,
    SignalWait,
    State,
    Step,
    TimerWait,
    Transition,
    WorkflowDefinition,
)
from orchestrator.examples.registry import app

__all__ = ["app"]


APPROVAL_THRESHOLD = 3

# ---------------------------------------------------------------------------
# document_review
# ---------------------------------------------------------------------------


class ReviewInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    document: str


class ReviewRequest(BaseModel):
    documents: list[str]


class ReviewResult(BaseModel):
    decision: str  # "approved" | "rejected" | "needs_documents"
    documents: int


class ReviewOutput(BaseModel):
    decision: str
    documents: int


@app.activity("review_document", input=ReviewRequest, output=ReviewResult)
def review_document(req: ReviewRequest) -> ReviewResult:
    """Reject fraud; approve with enough documents; otherwise ask for more."""
    count = len(req.documents)
    if any("fraud" in doc.lower() for doc in req.documents):
        decision = "rejected"
    elif count >= APPROVAL_THRESHOLD:
        decision = "approved"
    else:
        decision = "needs_documents"
    return ReviewResult(decision=decision, documents=count)


def _all_documents(ctx: Context[ReviewInput]) -> dict[str, Any]:
    added = [p.get("document", "") for p in ctx.signals.get("documents_added", [])]
    return {"documents": [ctx.input_dict["document"], *added]}


def _decision_is(decision: str) -> Any:
    def check(ctx: Context[ReviewInput]) -> bool:
        return bool(ctx.results["review"]["decision"] == decision)

    check.__qualname__ = f"decision_is_{decision}"
    return check


def _review_progress(ctx: QueryContext) -> dict[str, Any]:
    """Where the review is and the documents it has (query ``progress``)."""
    return {"state": ctx.state, "status": ctx.status, **_all_documents(ctx)}


def _output(decision: str) -> Any:
    def output(ctx: Context[ReviewInput]) -> dict[str, Any]:
        review = ctx.results.get("review", {})
        return {"decision": decision, "documents": review.get("documents", 1)}

    output.__qualname__ = f"output_{decision}"
    return output


document_review = app.workflow(
    WorkflowDefinition(
        "document_review",
        1,
        ReviewInput,
        [
            State(
                "review",
                steps=[Step("review", review_document, input=_all_documents)],
                transitions=[
                    Transition("approved", when=_decision_is("approved")),
                    Transition("rejected", when=_decision_is("rejected")),
                    Transition("needs_documents"),
                ],
            ),
            State(
                "needs_documents",
                wait=SignalWait(
                    "documents_added", timeout=timedelta(days=7), on_timeout="rejected"
                ),
                transitions=[Transition("review")],
            ),
            State("approved", complete=_output("approved")),
            State("rejected", complete=_output("rejected")),
        ],
        output_model=ReviewOutput,
        description="Review a document; ask for more documents until there are enough.",
        queries=[Query("progress", _review_progress)],
    )
)

# ---------------------------------------------------------------------------
# parallel_checks
# ---------------------------------------------------------------------------


class NInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int


class Value(BaseModel):
    value: int


class CombineInput(BaseModel):
    a: int
    b: int
    c: int


@app.activity("check_a", input=NInput, output=Value)
def check_a(inp: NInput) -> Value:
    return Value(value=inp.n + 1)


@app.activity("check_b", input=NInput, output=Value)
def check_b(inp: NInput) -> Value:
    return Value(value=inp.n * 2)


@app.activity("check_c", input=NInput, output=Value)
def check_c(inp: NInput) -> Value:
    return Value(value=inp.n * inp.n)


@app.activity("combine_checks", input=CombineInput, output=Value)
def combine_checks(inp: CombineInput) -> Value:
    return Value(value=inp.a + inp.b + inp.c)


def _combine_input(ctx: Context[NInput]) -> dict[str, int]:
    r = ctx.results
    return {"a": r["check_a"]["value"], "b": r["check_b"]["value"], "c": r["check_c"]["value"]}


def _final_value(ctx: Context[NInput]) -> dict[str, int]:
    return {"result": ctx.results["combine"]["value"]}


parallel_checks = app.workflow(
    WorkflowDefinition.dag(
        "parallel_checks",
        1,
        NInput,
        [
            Step("check_a", check_a),
            Step("check_b", check_b),
            Step("check_c", check_c),
            Step(
                "combine",
                combine_checks,
                after=["check_a", "check_b", "check_c"],
                input=_combine_input,
            ),
        ],
        output=_final_value,
        description="Three parallel checks of n, joined and combined (n+1 + 2n + n*n).",
    )
)

# ---------------------------------------------------------------------------
# three_step (benchmark)
# ---------------------------------------------------------------------------


@app.activity("add_one", input=NInput, output=NInput)
def add_one(inp: NInput) -> NInput:
    return NInput(n=inp.n + 1)


@app.activity("double", input=NInput, output=NInput)
def double(inp: NInput) -> NInput:
    return NInput(n=inp.n * 2)


@app.activity("square", input=NInput, output=NInput)
def square(inp: NInput) -> NInput:
    return NInput(n=inp.n * inp.n)


def _result_of(step: str) -> Any:
    def take(ctx: Context[NInput]) -> Any:
        return ctx.results[step]

    take.__qualname__ = f"result_of_{step}"
    return take


three_step = app.workflow(
    WorkflowDefinition.dag(
        "three_step",
        1,
        NInput,
        [
            Step("one", add_one),
            Step("two", double, after=["one"], input=_result_of("one")),
            Step("three", square, after=["two"], input=_result_of("two")),
        ],
        output=_result_of("three"),
        description="Three sequential trivial activities: ((n + 1) * 2) ** 2.",
    )
)

# ---------------------------------------------------------------------------
# timer_demo
# ---------------------------------------------------------------------------


class TimerInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(ge=0)


def _seconds(ctx: Context[TimerInput]) -> float:
    return float(ctx.input_dict["seconds"])


def _waited(ctx: Context[TimerInput]) -> dict[str, Any]:
    return {"waited_seconds": ctx.input_dict["seconds"]}


timer_demo = app.workflow(
    WorkflowDefinition(
        "timer_demo",
        1,
        TimerInput,
        [State("sleep", wait=TimerWait(_seconds), complete=_waited)],
        description="Wait on a durable timer, then complete.",
    )
)

# Workflows that write to external systems (the ledger, the booking service) and the
# human-task example register themselves on the same application.
from orchestrator.examples import (  # noqa: E402, F401
    approvals,
    batches,
    children,
    invoices,
    summaries,
    travel,
)
