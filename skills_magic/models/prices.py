"""What a run costs in US dollars: one price table per model family, the date it was checked, and the user's
overrides. (A first version: its interface, `cost_of`, is what the run log and the views use.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PRICES_CHECKED = "2026-12-01"  # the day the table below was compared with Anthropic's published prices
PER_TOKENS = 1_000_000  # prices are per million tokens
BATCH_DISCOUNT = 0.5  # Message Batches cost half


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float


def _family(input_price: float, output_price: float) -> Price:
    # cache writes cost 1.25x input (5 minutes) or 2x (1 hour); cache reads 0.1x input
    return Price(input_price, output_price, input_price * 1.25, input_price * 2, input_price * 0.1)


PRICES: dict[str, Price] = {  # matched by the family word in a model id (claude-opus-5-5 -> opus)
    "opus": _family(5.0, 25.0),
    "sonnet": _family(3.0, 15.0),
    "haiku": _family(1.0, 5.0),
}
OVERRIDES: dict[str, Price] = {}  # model id (exact) -> price: the user's own (`%skills price`)


def price_of(model_id: str | None) -> Price | None:
    """The price of a model id: an override for exactly that id, else its family's; None when unknown."""
    if not model_id:
        return None
    if model_id in OVERRIDES:
        return OVERRIDES[model_id]
    for family, price in PRICES.items():
        if family in model_id:
            return price
    return None


def cost_of(model_id: str | None, usage: Mapping[str, int], *, batch: bool = False) -> float | None:
    """The dollars of one usage (the API's token counts) at `model_id`'s price; None for a model with no price."""
    price = price_of(model_id)
    if price is None:
        return None
    dollars = (usage.get("input_tokens", 0) * price.input + usage.get("output_tokens", 0) * price.output
               + usage.get("cache_creation_input_tokens", 0) * price.cache_write_5m
               + usage.get("cache_read_input_tokens", 0) * price.cache_read) / PER_TOKENS
    return dollars * (BATCH_DISCOUNT if batch else 1.0)
