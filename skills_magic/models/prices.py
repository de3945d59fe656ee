"""What a run costs in US dollars: one price table per model, the date it was checked, and the user's overrides.

Where the figures come from (checked 2026-12-01 through the docs search of Anthropic's pages):
- platform.claude.com/docs/en/about-claude/pricing ("Model pricing"): Fable 5.1, Fable 5, Opus 5, Opus 4.8 - 4.5,
  Opus 4.1 and 4, with their 5-minute and 1-hour cache writes and cache hits;
- the model pages (platform.claude.com/docs/.../models/opus-5-5, opus-5): Opus 5.5 ($4 / $20, writes $5 / $8, hits
  $0.20) and "Batch API: 50% discount on input and output";
- the lineup tables of those pages: Sonnet 5.5 and Sonnet 5 at $2 / $10, Haiku 5.5 "from $0.10 / $0.50", Haiku 4.5
  at $1 / $5; docs.anthropic.com's batch-processing page: Sonnet 4 / 3.7 / 3.5, Haiku 3.5 and 3 (batch = half).
Not checked on an official page: the cache prices of Sonnet 5.5 / 5, Haiku 5.5 and the older Sonnet and Haiku rows
(they follow the published rule: writes 1.25x input for 5 minutes, 2x for 1 hour, hits 0.1x), Haiku 5.5's higher
price above 100,000 prompt tokens (not modelled: its lower band is used), and whether the batch discount applies
to cache tokens too (it is applied to all of a batch request's tokens here).

Overrides: `prices.yaml` in the user's config folder ($SKILLS_MAGIC_CONFIG_DIR, else the platform's), a mapping of
model id (or a key of the table, like `sonnet`) to fields (`input: 3`, `output: 15`, `cache_write_5m`, ...), and
`%skills price MODEL input=3 output=15` for the session. An override wins over the table.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace

from skills_magic.errors import SkillsMagicError
from skills_magic.paths import config_dir

PRICES_CHECKED = "2026-12-01"  # the day the table below was compared with Anthropic's published prices
PRICES_SOURCE = "https://platform.claude.com/docs/en/about-claude/pricing"
PER_TOKENS = 1_000_000  # prices are per million tokens
BATCH_DISCOUNT = 0.5  # Message Batches cost half
CACHE_WRITE_5M, CACHE_WRITE_1H, CACHE_READ = 1.25, 2.0, 0.1  # the published multipliers of the input price
PRICES_FILE = "prices.yaml"  # the user's overrides, in the config folder
WEB_SEARCH_USD_PER_REQUEST = 0.01  # server web search: $10 per 1,000 searches (web fetch costs only its tokens)


class PriceError(SkillsMagicError, ValueError):
    """A price the user gave that cannot be used (an unknown field, a negative or non-numeric value)."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens; `batch` is the factor a Message Batches request pays."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    batch: float = BATCH_DISCOUNT


PRICE_FIELDS = tuple(Price.__dataclass_fields__)


def _family(input_price: float, output_price: float, cache_read: float | None = None) -> Price:
    """A price from input and output by the published rule (writes 1.25x / 2x input, hits 0.1x unless given)."""
    return Price(input_price, output_price, input_price * CACHE_WRITE_5M, input_price * CACHE_WRITE_1H,
                 input_price * CACHE_READ if cache_read is None else cache_read)


# matched against a model id by the longest key it contains (claude-opus-4-1-20250805 -> opus-4-1); a bare family
# word is the fallback for a version the table does not know (priced high rather than low: a cap errs on the safe side)
PRICES: dict[str, Price] = {
    "fable-5-1": _family(10.0, 50.0, 0.25), "mythos-5-1": _family(10.0, 50.0, 0.25),
    "fable-5": _family(10.0, 50.0, 1.0), "mythos-5": _family(10.0, 50.0, 1.0),
    "opus-5-5": Price(4.0, 20.0, 5.0, 8.0, 0.20),
    "opus-5": _family(5.0, 25.0), "opus-4-8": _family(5.0, 25.0), "opus-4-7": _family(5.0, 25.0),
    "opus-4-6": _family(5.0, 25.0), "opus-4-5": _family(5.0, 25.0),
    "opus-4-1": _family(15.0, 75.0), "opus-4": _family(15.0, 75.0), "3-opus": _family(15.0, 75.0),
    "sonnet-5-5": _family(2.0, 10.0), "sonnet-5": _family(2.0, 10.0),
    "sonnet-4": _family(3.0, 15.0), "3-7-sonnet": _family(3.0, 15.0), "3-5-sonnet": _family(3.0, 15.0),
    "haiku-5-5": _family(0.10, 0.50), "haiku-4-5": _family(1.0, 5.0),
    "3-5-haiku": _family(0.80, 4.0), "3-haiku": _family(0.25, 1.25),
    "fable": _family(10.0, 50.0), "mythos": _family(10.0, 50.0),
    "opus": _family(5.0, 25.0), "sonnet": _family(3.0, 15.0), "haiku": _family(1.0, 5.0),
}
OVERRIDES: dict[str, Price] = {}  # model id or table key -> price: the user's own (prices.yaml, `%skills price`)
OVERRIDE_ORIGINS: dict[str, str] = {}  # the same keys -> where each came from (the file's path, or "%skills price")
_loaded: list[str | None] = []  # the prices.yaml path whose overrides are in OVERRIDES (read once per path)


def prices_path() -> str:
    return os.path.join(config_dir(), PRICES_FILE)


def _matching(table: Mapping[str, Price], model_id: str) -> str | None:
    """The longest key of `table` that `model_id` holds as a whole part (no digit right after it)."""
    found = [k for k in table if k == model_id or re.search(rf"(^|[^a-z0-9]){re.escape(k)}(?![0-9])", model_id)]
    return max(found, key=len) if found else None


def price_of(model_id: str | None) -> Price | None:
    """The price of a model id: the user's override for it (exact, else by table key), else the table's; None when
    the table does not know it."""
    if not model_id:
        return None
    load_user_prices()
    if model_id in OVERRIDES:
        return OVERRIDES[model_id]
    key = _matching(OVERRIDES, model_id)
    if key is not None:
        return OVERRIDES[key]
    key = _matching(PRICES, model_id)
    return PRICES[key] if key is not None else None


def cost_of(model_id: str | None, usage: Mapping[str, int], *, batch: bool = False) -> float | None:
    """The dollars of one usage (the API's token counts) at `model_id`'s price; None for a model with no price.
    Cache writes are 5-minute ones unless the usage says how many were 1-hour (`cache_creation.ephemeral_1h_input_tokens`
    as the API reports it, or `cache_creation_1h_input_tokens`). Each server web search (`server_tool_use.
    web_search_requests`) adds WEB_SEARCH_USD_PER_REQUEST."""
    price = price_of(model_id)
    if price is None:
        return None
    nested = usage.get("cache_creation") if isinstance(usage.get("cache_creation"), Mapping) else {}
    written = int(usage.get("cache_creation_input_tokens") or 0)
    hour = int(usage.get("cache_creation_1h_input_tokens") or nested.get("ephemeral_1h_input_tokens") or 0)
    dollars = (int(usage.get("input_tokens") or 0) * price.input + int(usage.get("output_tokens") or 0) * price.output
               + max(written - hour, 0) * price.cache_write_5m + hour * price.cache_write_1h
               + int(usage.get("cache_read_input_tokens") or 0) * price.cache_read) / PER_TOKENS
    server = usage.get("server_tool_use") if isinstance(usage.get("server_tool_use"), Mapping) else {}
    searches = int(server.get("web_search_requests") or 0) * WEB_SEARCH_USD_PER_REQUEST  # no batch discount on these
    return dollars * (price.batch if batch else 1.0) + searches


def _number(name: str, value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise PriceError(f"{where}: {name} must be a number of dollars per million tokens, not {value!r}") from None
    if number < 0 or number != number:
        raise PriceError(f"{where}: {name} must be 0 or more dollars per million tokens, not {value!r}")
    return number


def priced(model_id: str, fields: Mapping[str, object], where: str = "%skills price") -> Price:
    """The price `fields` give `model_id`: on top of its current price (cache prices follow a new input price by the
    published rule unless given too); a model with no price needs at least input and output."""
    unknown = [name for name in fields if name not in PRICE_FIELDS]
    if unknown:
        raise PriceError(f"{where}: unknown price field {unknown[0]!r}; the fields are {', '.join(PRICE_FIELDS)}")
    values = {name: _number(name, value, where) for name, value in fields.items()}
    if "batch" in values and values["batch"] > 1:
        raise PriceError(f"{where}: batch is the factor a batch request pays (0.5: half), at most 1, not {values['batch']:g}")
    current = price_of(model_id)
    if current is None and not {"input", "output"} <= set(values):
        raise PriceError(f"{where}: {model_id!r} has no price yet: give at least input= and output=")
    base = current or _family(values["input"], values["output"])
    if "input" in values:  # the cache prices are multiples of the input price
        base = replace(_family(values["input"], values.get("output", base.output)), batch=base.batch)
    return replace(base, **values)


def parse_fields(words: Iterable[str]) -> dict[str, str]:
    """`input=3 output=15` as {field: text}; a word without `=` is an error."""
    fields = {}
    for word in words:
        name, equals, value = word.partition("=")
        if not equals or not name:
            raise PriceError(f"%skills price: {word!r} is not FIELD=DOLLARS (e.g. input=3); the fields are "
                             f"{', '.join(PRICE_FIELDS)}")
        fields[name.strip()] = value.strip()
    return fields


def set_price(model_id: str, fields: Mapping[str, object], origin: str = "%skills price") -> Price:
    """Override `model_id`'s price for this process (what `%skills price MODEL FIELD=DOLLARS ...` does)."""
    price = priced(model_id, fields, origin)
    OVERRIDES[model_id], OVERRIDE_ORIGINS[model_id] = price, origin
    return price


def load_user_prices(path: str | None = None, *, again: bool = False) -> str | None:
    """Read the user's prices.yaml into OVERRIDES (once per path, or `again`); the path read, or None if none exists.
    A file that cannot be used is a PriceError naming it."""
    path = path or prices_path()
    if _loaded and _loaded[0] == path and not again:
        return path if os.path.exists(path) else None
    for key in [k for k, origin in OVERRIDE_ORIGINS.items() if origin not in ("%skills price",)]:
        OVERRIDES.pop(key, None), OVERRIDE_ORIGINS.pop(key, None)
    _loaded[:] = [path]
    if not os.path.exists(path):
        return None
    from skills_magic.datafiles import read_yaml_or_json

    data = read_yaml_or_json(path) or {}
    if not isinstance(data, Mapping) or any(not isinstance(v, Mapping) for v in data.values()):
        raise PriceError(f"{path}: expected a mapping of model id to fields (e.g. claude-opus-5-5: {{input: 4, output: 20}})")
    for model_id, fields in data.items():
        if OVERRIDE_ORIGINS.get(str(model_id)) != "%skills price":  # what the user typed this session wins
            OVERRIDES[str(model_id)] = priced(str(model_id), fields, f"{path}: {model_id}")
            OVERRIDE_ORIGINS[str(model_id)] = path
    return path


def table() -> list[tuple[str, dict[str, float], str]]:
    """(key, fields, origin) for every override, then every row of the table: what `%skills price` shows."""
    load_user_prices()
    rows = [(key, asdict(price), OVERRIDE_ORIGINS.get(key, "")) for key, price in OVERRIDES.items()]
    return rows + [(key, asdict(price), "") for key, price in PRICES.items()]
