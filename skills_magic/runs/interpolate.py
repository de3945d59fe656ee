"""The kernel's values in a run's task: `{name}` is replaced by the value of `name` in the notebook, `{In[n]}`,
`{Out[n]}` and `{Err[n]}` by cell n's input, output and error, and `{{` / `}}` stand for a literal brace. Any other
braces (a JSON example, `{a, b}`) are left as written. A name the kernel does not have is an error before any model
call, never a silent `{name}` sent to the model."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from skills_magic.errors import SkillsMagicError

PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(In|Out|Err)\[(\d+)\]\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
HISTORIES = ("In", "Out", "Err")  # IPython's input list and output dict; Err is kept by the extension


class InterpolationError(SkillsMagicError):
    """A `{name}` in the task that the kernel does not define (or a cell number it has not run)."""


def interpolate(text: str, namespace: Mapping[str, Any], errors: Mapping[int, str] | None = None) -> str:
    """`text` with its placeholders replaced from `namespace` (the notebook's user namespace, holding In and Out)."""
    histories = {"In": namespace.get("In", []), "Out": namespace.get("Out", {}), "Err": errors or {}}

    def value(match: re.Match) -> str:
        whole, history, number, name = match.group(0), match.group(1), match.group(2), match.group(3)
        if whole in ("{{", "}}"):
            return whole[0]
        if history is not None:
            cells = histories[history]
            n = int(number)
            try:
                found = cells[n]
            except (IndexError, KeyError):
                raise InterpolationError(f"{whole}: cell {n} has no {'error' if history == 'Err' else history.lower() + 'put'}"
                                         " in this kernel; write {{ and }} for literal braces, or --raw") from None
            return str(found)
        if name not in namespace:
            raise InterpolationError(f"{whole}: the kernel has no variable {name!r}; write {{{{{name}}}}} for the text "
                                     f"{whole} itself, or run the cell with --raw")
        return str(namespace[name])

    return PLACEHOLDER.sub(value, text)
