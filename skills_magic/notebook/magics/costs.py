"""`%skills price`: the price table runs are costed with, and a user's overrides; and `--max-cost`, the budget cap
option `%%skill run`, `%%skill verify` and `%skills eval` share.

A mixin of `%skills` (SkillsCommandMagics inherits it): its `@subcommand` methods are `%skills` subcommands."""

from __future__ import annotations

import argparse

from IPython.core.magic_arguments import argument

from skills_magic.models import prices
from skills_magic.notebook.magics.commands import subcommand
from skills_magic.notebook.views.costs import EstimateView, PriceView
from skills_magic.runs.budget import BudgetError, read_cap


def dollars(text: str) -> float:
    """--max-cost's value: US dollars, 0 or more (argparse's one-line error otherwise)."""
    try:
        return read_cap(text)
    except BudgetError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


MAX_COST = argument("--max-cost", type=dollars, metavar="USD",
                    help="stop before a model call that would cross this many US dollars (else $SKILLS_MAGIC_MAX_COST)")


def show_estimate(estimate) -> None:
    """The pre-flight estimate, displayed before the verification or eval starts (where something can be spent or a
    cap is kept: a scripted model's runs cost nothing)."""
    if estimate.shown:
        from IPython.display import display

        display(EstimateView(estimate))


class CostCommands:
    """`%skills price`: the prices runs are costed with."""

    @subcommand("price")
    @argument("model", nargs="?", metavar="MODEL", help="a model id (or a key of the table, like sonnet)")
    @argument("fields", nargs="*", metavar="FIELD=USD",
              help=f"dollars per million tokens: {', '.join(prices.PRICE_FIELDS)} (batch: the factor a batch pays)")
    @argument("--reload", action="store_true", help="read prices.yaml in the config folder again")
    def _price(self, args):
        """The price table (with the date it was checked) and your overrides; `MODEL FIELD=USD ...` overrides a
        model's price for this session (prices.yaml in your config folder keeps them for every session)."""
        note = ""
        if args.reload:
            prices.load_user_prices(again=True)
        if args.model and args.fields:
            price = prices.set_price(args.model, prices.parse_fields(args.fields))
            note = (f"{args.model}: input ${price.input:g}, output ${price.output:g} per million tokens, for this "
                    "session (prices.yaml keeps it)")
        elif args.model:
            price = prices.price_of(args.model)
            note = f"{args.model}: no price (give one: %skills price {args.model} input=USD output=USD)" if price is None else (
                f"{args.model}: input ${price.input:g}, output ${price.output:g}, cache write ${price.cache_write_5m:g} "
                f"(5m) / ${price.cache_write_1h:g} (1h), cache read ${price.cache_read:g} per million tokens")
        return PriceView(prices.table(), prices.PRICES_CHECKED, prices.PRICES_SOURCE, prices.prices_path(), note)
