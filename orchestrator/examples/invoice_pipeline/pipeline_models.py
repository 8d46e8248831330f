"""The invoice pipeline's data: what a run is given, what the model must answer, what a
clerk corrects, and what the external systems are sent (docs/invoice-pipeline.md)."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: An ISO date, as the extraction schema carries it.
DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"


class ApprovalSla(BaseModel):
    """How long an approval may take (the intake sets it; the demo shortens it)."""

    model_config = ConfigDict(extra="forbid")
    due_s: float = Field(default=86_400, gt=0)
    escalate_after_s: float = Field(default=86_400, gt=0)
    expires_after_s: float = Field(default=3 * 86_400, gt=0)


class InvoiceFile(BaseModel):
    """One received invoice file. Its SHA-256 is the run's workflow id, so a re-upload of
    the same bytes joins the run that file started."""

    model_config = ConfigDict(extra="forbid")
    file_name: str = Field(min_length=1, max_length=255)
    document: str = Field(min_length=1, max_length=50_000)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    sla: ApprovalSla = ApprovalSla()

    @model_validator(mode="after")
    def _digest_matches(self) -> InvoiceFile:
        if file_digest(self.document) != self.sha256:
            raise ValueError("sha256 is not the SHA-256 of the document")
        return self


def file_digest(document: str) -> str:
    """The invoice file's id: the SHA-256 of its UTF-8 text."""
    return hashlib.sha256(document.encode()).hexdigest()


def submission(
    file_name: str, document: str, sla: ApprovalSla | None = None
) -> tuple[str, dict[str, Any]]:
    """The workflow id and the input of the run one received file starts."""
    digest = file_digest(document)
    body = InvoiceFile(
        file_name=file_name, document=document, sha256=digest, sla=sla or ApprovalSla()
    )
    return digest, body.model_dump()


class LineItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = Field(min_length=1)
    amount: float


class InvoiceCorrection(BaseModel):
    """What a clerk submits to correct an extraction: the fields, no confidence."""

    schema_version: ClassVar[int] = 1
    model_config = ConfigDict(extra="forbid")
    supplier: str = Field(min_length=1)
    invoice_number: str = Field(min_length=1)
    date: str = Field(pattern=DATE_PATTERN)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    net: float
    tax: float
    total: float
    line_items: list[LineItem] = Field(min_length=1, max_length=200)


class InvoiceFields(InvoiceCorrection):
    """What the model must answer for an invoice (schema v1): the fields and how sure
    it is of them."""

    confidence: float = Field(ge=0, le=1)


class DuplicateQuery(BaseModel):
    """Ask the read model for another run of the same supplier's invoice number."""

    model_config = ConfigDict(extra="forbid")
    invoice_key: str
    workflow_id: str


class DuplicateAnswer(BaseModel):
    duplicate_of: str | None


class PostingRequest(BaseModel):
    """The ledger posting an invoice makes (and an approver approves, by digest)."""

    model_config = ConfigDict(extra="forbid")
    ledger_key: str
    invoice_id: str
    supplier: str
    invoice_number: str
    currency: str
    amount: float


class Posting(BaseModel):
    posting_id: str
    ledger_key: str


class PaymentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    posting_id: str
    supplier: str
    currency: str
    amount: float


class Reconciliation(BaseModel):
    """The ledger's own record of the posting checked against the run's (recorded)."""

    matches: bool
    problems: list[str]
