"""Subcommands of a magic, declared with IPython's `@argument` decorators (`IPython.core.magic_arguments`).

`%skills list --json` is the magic `skills` and its subcommand `list`: a method marked `@subcommand("list")`, whose
`@argument`s are its options and whose docstring is its help. A magic's subcommands become one argparse parser with
subparsers, so a line is parsed (and refused) exactly as argparse does it, and every error is a one-line UsageError
ending with the magic's short usage. The magic's docstring, which `%skills?` prints, is generated from the same
parsers: each subcommand's real usage, help and options.
"""

from __future__ import annotations

import argparse
import difflib
import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

from skills_magic.errors import SkillsMagicError

CLOSE_MATCHES = 2  # choices suggested for a mistyped one ("did you mean list?")


class MagicParser(MagicArgumentParser):
    """IPython's parser for magics (its `%`-prefixed usage in help), raising a UsageError that ends with the magic's
    one-line usage instead of printing and exiting; a magic's subparsers share its usage line."""

    def __init__(self, *args, usage_line: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.usage_line = usage_line
        self.commands: dict[str, MagicParser] = {}  # a parser with subcommands: each one's parser, in order

    def error(self, message):
        raise UsageError(f"{message}; {self.usage_line}")

    def exit(self, status=0, message=None):
        raise UsageError(self.usage_line)

    def _check_value(self, action, value):
        """argparse's check of a choice, naming the close matches of a typo instead of every choice there is."""
        if action.choices is not None and value not in action.choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in action.choices], n=CLOSE_MATCHES)
            if close:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r} (did you mean {' or '.join(close)}?)")
        super()._check_value(action, value)


def subcommand(name: str):
    """Marks a method of a Magics class as the subcommand `name` of its magic; it is called with the parsed args."""

    def mark(method: Callable) -> Callable:
        method.subcommand = name
        return method

    return mark


def subcommands(cls: type) -> list[Callable]:
    """The methods a class marks as subcommands, in the order they are defined (the order usage lists them): its
    own first, then those of the mixins it inherits (one per subject: `magics.runlog`, ...), in MRO order."""
    found: dict[str, Callable] = {}
    for klass in cls.__mro__:
        for member in vars(klass).values():
            if hasattr(member, "subcommand"):
                found.setdefault(member.subcommand, member)
    return list(found.values())


def add_arguments(parser: MagicParser, method: Callable) -> MagicParser:
    """The method's `@argument` (and `@argument_group`) declarations, in source order, as IPython applies them."""
    group = None
    for declaration in reversed(getattr(method, "decorators", [])):
        group = declaration.add_to_parser(parser, group) or group
    return parser


def parser_of(method: Callable, prog: str, usage_line: str) -> MagicParser:
    """A parser for one method's arguments (a subcommand parsed on its own, like `%%skill verify`)."""
    return add_arguments(MagicParser(prog=prog, usage_line=usage_line, description=method.__doc__), method)


def command_parser(prog: str, dest: str, usage_line: str, methods: Sequence[Callable]) -> MagicParser:
    """One parser for a magic whose first word names a subcommand; `dest` holds that word, `handler` its method."""
    parser = MagicParser(prog=prog, usage_line=usage_line)
    choices = parser.add_subparsers(dest=dest, parser_class=MagicParser)
    for method in methods:
        sub = choices.add_parser(method.subcommand, usage_line=usage_line, description=method.__doc__)
        add_arguments(sub, method).set_defaults(handler=method)
        parser.commands[method.subcommand] = sub
    return parser


def help_text(summary: str, parsers: Sequence[MagicParser], notes: str = "") -> str:
    """A magic's docstring (`%skills?`): what it does, then each subcommand's usage, help and options."""
    return "\n".join([summary.strip(), "", *(p.format_help() for p in parsers), notes.strip()]).strip() + "\n"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


positive = _positive  # a count of at least 1; argparse names the function in its message ("invalid _positive value")


def words(line: str, usage_line: str, split: Callable[[str], list[str]] = shlex.split) -> list[str]:
    """The words of a magic's line, quotes grouping as in a shell (or as `split` says); an unclosed quote is a
    UsageError."""
    try:
        return split(line)
    except ValueError as error:  # shlex's only error: "No closing quotation", "No escaped character"
        raise UsageError(f"{error}; {usage_line}") from None


@contextmanager
def user_errors() -> Iterator[None]:
    """A user's error (SkillsMagicError) becomes a one-line UsageError: the notebook shows it without a traceback."""
    try:
        yield
    except SkillsMagicError as error:
        raise UsageError(str(error)) from None
