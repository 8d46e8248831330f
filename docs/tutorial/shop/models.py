"""What flows through the shop's workflows: pydantic models, checked at every boundary."""

from typing import Any

from pydantic import BaseModel, Field


class Line(BaseModel):
    sku: str = Field(min_length=1)
    quantity: int = Field(gt=0)
    unit_cents: int = Field(gt=0)


class Order(BaseModel):
    order_id: str = Field(min_length=1)
    customer: str
    card: str = Field(min_length=4)
    lines: list[Line] = Field(min_length=1)


class Priced(BaseModel):
    total_cents: int
    needs_approval: bool


class Reservation(BaseModel):
    reservation_id: str
    sku: str
    quantity: int


class Charge(BaseModel):
    order_id: str
    card: str
    amount_cents: int


class Payment(BaseModel):
    payment_id: str
    amount_cents: int


class Refund(BaseModel):
    refund_id: str


class Released(BaseModel):
    reservation_id: str


class Lookup(BaseModel):
    """A status query's input: the key of the call in doubt, and that call's input."""

    idempotency_key: str
    input: dict[str, Any]


class Found(BaseModel):
    """A status query's answer: whether the call in doubt took effect, and its answer."""

    found: bool
    result: dict[str, Any] | None = None


class Shipment(BaseModel):
    order_id: str
    parcels: int


class Shipped(BaseModel):
    tracking: str


class Confirmation(BaseModel):
    order_id: str
    payment_id: str
    tracking: str
    total_cents: int


class DigestRequest(BaseModel):
    shop: str


class Digest(BaseModel):
    shop: str
    charges: int
