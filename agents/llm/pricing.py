"""Dollar cost of a reply from its token usage, so a search can report and cap what it spends.

Prices are USD per million tokens, per model. The defaults ship in `prices.toml`; the
config file may override or add entries. A model with no price costs 0 and is reported as
unpriced rather than guessed.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.llm.base import Usage

DEFAULT_PRICES_PATH = Path(__file__).with_name("prices.toml")
PRICE_KEYS = ("input", "output", "cache_read", "cache_write")


@dataclass(frozen=True)
class Price:
    """USD per million tokens. Cache prices default to the input price (no discount known)."""

    input: float
    output: float
    cache_read: float
    cache_write: float


PriceTable = Mapping[str, Price]


def normalize_model(model: str) -> str:
    """One spelling per model: `Qwen/Qwen3-Coder-480B` and `gpt-oss:120b` match table keys."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return name.replace(":", "-").replace("@", "-")


def parse_prices(table: Mapping[str, Any], where: str = "prices") -> dict[str, Price]:
    """`{model: {input, output, cache_read?, cache_write?}}` → Prices; ValueError names the key."""
    if not isinstance(table, Mapping):
        raise ValueError(f'{where} must be a table of models, e.g. [{where}."model-name"]')
    prices: dict[str, Price] = {}
    for model, entry in table.items():
        key = f'{where}."{model}"'
        if not isinstance(entry, Mapping):
            raise ValueError(f"{key} must be a table with input and output USD per million tokens")
        unknown = sorted(set(entry) - set(PRICE_KEYS))
        if unknown:
            raise ValueError(f"{key}.{unknown[0]} is not a price: use {', '.join(PRICE_KEYS)}")
        for required in ("input", "output"):
            if required not in entry:
                raise ValueError(f"{key}.{required} is missing: give USD per million tokens")
        values = {name: _usd(entry[name], f"{key}.{name}") for name in entry}
        values.setdefault("cache_read", values["input"])
        values.setdefault("cache_write", values["input"])
        prices[normalize_model(model)] = Price(**values)
    return prices


def _usd(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} must be a number (USD per million tokens), got {value!r}")
    if value < 0:
        raise ValueError(f"{key} must not be negative, got {value!r}")
    return float(value)


@functools.cache
def _default_prices() -> dict[str, Price]:
    with DEFAULT_PRICES_PATH.open("rb") as handle:
        return parse_prices(tomllib.load(handle).get("prices", {}), f"{DEFAULT_PRICES_PATH.name}")


def default_prices() -> dict[str, Price]:
    """The shipped price table (a fresh dict each call, safe to update)."""
    return dict(_default_prices())


def find_price(model: str, prices: PriceTable) -> Price | None:
    """Exact match, else the longest key the name starts with (dated or sized variants)."""
    name = normalize_model(model)
    if name in prices:
        return prices[name]
    matches = [key for key in prices if name.startswith(key + "-")]
    return prices[max(matches, key=len)] if matches else None


def cost_usd(model: str, usage: Usage, prices: PriceTable) -> float | None:
    """What `usage` cost on `model`; None when the model has no known price."""
    price = find_price(model, prices)
    if price is None:
        return None
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / 1_000_000


def unpriced_note(model: str) -> str:
    """The line a cost summary shows for a model it could not price."""
    return f'no price known for {model} (counted as $0; add [prices."{model}"] to the config)'
