"""A SKILL.md's frontmatter: the text between its `---` fences, read as YAML and as the known fields.

YAML is read safely with YAML 1.2 booleans (`description: yes` is the string "yes", as real clients read it), and a
document whose aliases would expand it past MAX_ALIAS_NODES (a "billion laughs") is refused before anything walks
the value. Nothing here reports problems: `skill.parse_frontmatter` turns what goes wrong into diagnostics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from skills_magic.errors import SkillsMagicError

MAX_ALIAS_NODES = 10_000  # nodes aliases may add when expanded: real frontmatter adds a few; a billion laughs, billions


class TooManyAliases(SkillsMagicError):
    """The frontmatter's aliases expand it by more than MAX_ALIAS_NODES nodes, or endlessly (an alias bomb)."""


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's C parser when installed: 5-10x faster
    """Safe YAML with YAML 1.2 booleans: `description: yes` is the string "yes", as real clients read it."""


_YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, _YAML12_BOOL if tag == "tag:yaml.org,2002:bool" else regexp) for tag, regexp in resolvers]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


class _NotPlain(Exception):
    """Raised inside the fast path when a node needs PyYAML's own constructor."""


def construct(loader, node) -> Any:
    """The Python value of a composed YAML node, as `loader.construct_document` gives it, but faster.

    Frontmatter is nearly all plain strings in plain mappings and lists: those are built here directly (PyYAML's
    generic constructor costs more than parsing). Typed scalars go to PyYAML one by one; anything else goes to PyYAML
    whole: merge keys, tagged collections, and aliases of collections, which PyYAML shares instead of copying
    (copies would let a few lines of aliases expand exponentially: the "billion laughs").
    """
    try:
        return _plain(node, set(), loader)
    except (_NotPlain, RecursionError):
        return loader.construct_document(node)


def _plain(node, seen: set[int], loader) -> Any:
    if isinstance(node, yaml.ScalarNode):
        # a scalar cannot expand: typed ones (numbers, dates, booleans) are PyYAML's, one node at a time
        return node.value if node.tag == _STR else loader.construct_document(node)
    if id(node) in seen:
        raise _NotPlain  # an alias of a collection
    seen.add(id(node))
    if node.tag == _MAP and isinstance(node, yaml.MappingNode):
        result = {}
        for key_node, value_node in node.value:
            if key_node.tag != _STR or not isinstance(key_node, yaml.ScalarNode):
                raise _NotPlain  # merge keys, non-string keys: PyYAML's rules
            result[key_node.value] = _plain(value_node, seen, loader)
        return result
    if node.tag == _SEQ and isinstance(node, yaml.SequenceNode):
        return [_plain(item, seen, loader) for item in node.value]
    raise _NotPlain


def alias_growth(root) -> int:
    """How many more nodes the document has with every alias expanded than as written (capped past the bound).

    An alias is counted each time it is used, as anything that walks the loaded value (pydantic, json, str) would
    meet it, but each node's expanded size is computed once (memoised), so the count costs one pass over the
    written nodes even for a billion laughs. A node that contains itself expands endlessly: past the bound.
    """
    endless = 2**62  # stands for "infinite": any number past the bound will do
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            return endless
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            return 1
        active.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        total = 1 + sum(size(child) for child in children)
        active.discard(key)
        sizes[key] = min(total, endless)  # keeps the numbers small: 9**29 is as refused as 2**62
        return sizes[key]

    expanded = size(root)
    return expanded - len(sizes) if expanded < endless else endless


def _duplicate_keys(node, found: list[tuple[str, int, int]]) -> None:
    """Keys that appear twice in one mapping, searched on the composed nodes (before PyYAML keeps the last)."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    found.append((key_node.value, key_node.start_mark.line, key_node.start_mark.column))
                seen.add(key_node.value)
            if isinstance(value_node, yaml.MappingNode):
                _duplicate_keys(value_node, found)


def load_frontmatter(text: str) -> tuple[Any, yaml.Node | None]:
    """The frontmatter's Python value and its composed root node (None for an empty document).

    Raises TooManyAliases before constructing an alias bomb, yaml.YAMLError for invalid YAML, and RecursionError for
    nesting too deep to walk."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None and alias_growth(node) > MAX_ALIAS_NODES:
            raise TooManyAliases(f"the aliases expand the frontmatter by more than {MAX_ALIAS_NODES:,} nodes")
        return (None if node is None else construct(loader, node)), node
    finally:
        loader.dispose()


@dataclass(frozen=True)
class TopLevelKeys:
    """What one pass over a mapping's top-level keys finds (lines are 0-based, as in the frontmatter text)."""

    lines: dict[str, int]  # key -> the line of its last occurrence
    metadata_text: dict[str, str]  # `metadata`'s scalars as written (`1.10`, not 1.1)
    duplicates: list[tuple[str, int, int]]  # (key, line, column) of each repeated key, nested mappings included


def top_level_keys(node: yaml.Node | None) -> TopLevelKeys:
    """The lines of the top-level keys, the metadata scalars as written and every duplicate key, in one pass."""
    lines: dict[str, int] = {}
    metadata_text: dict[str, str] = {}
    duplicates: list[tuple[str, int, int]] = []
    for key_node, value_node in node.value if isinstance(node, yaml.MappingNode) else ():
        if isinstance(key_node, yaml.ScalarNode):
            mark = key_node.start_mark
            if key_node.value in lines:
                duplicates.append((key_node.value, mark.line, mark.column))
            lines[key_node.value] = mark.line
        if isinstance(value_node, yaml.MappingNode):
            _duplicate_keys(value_node, duplicates)
            if key_node.value == "metadata":
                metadata_text = {
                    str(k.value): v.value
                    for k, v in value_node.value
                    if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)
                }
    return TopLevelKeys(lines, metadata_text, duplicates)


def is_frontmatter_fence(line: str) -> bool:
    # `---` alone on its line (trailing spaces and CR allowed), never a `---` inside a value or an indented one
    return line.rstrip(" \t\r\n") == "---" and line.startswith("---")


def split_frontmatter(text: str) -> tuple[str, str, int] | None:
    """Frontmatter text, body and the body's first line number; None when there is no closing fence.

    The closing fence is a line that is exactly `---` (trailing blanks allowed): a `---` inside a value or an
    indented one does not close the frontmatter (skills-ref cuts at the first `---` anywhere).
    """
    start = text.find("\n")
    if start < 0:
        return None
    position = start
    while True:
        fence = text.find("\n---", position)
        if fence < 0:
            return None
        line_end = text.find("\n", fence + 4)
        rest = text[fence + 4 : len(text) if line_end < 0 else line_end]
        if not rest or rest.isspace():
            frontmatter = text[start + 1 : fence + 1]
            body = "" if line_end < 0 else text[line_end + 1 :]
            return frontmatter, body, frontmatter.count("\n") + 3
        position = fence + 1


class Frontmatter(BaseModel):
    """The known frontmatter fields: the specification's and the widely used client extensions.

    Unknown keys are kept (`model_extra`). Types here are the lenient ones real clients accept (Claude Code takes
    a list for `allowed-tools`); the strict rules are in `validate.py`.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    name: str | None = None
    description: str | None = None
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    allowed_tools: str | list[str] | None = Field(None, alias="allowed-tools")
    when_to_use: str | None = None
    argument_hint: str | None = Field(None, alias="argument-hint")
    arguments: str | list[str] | None = None
    disable_model_invocation: bool = Field(False, alias="disable-model-invocation")
    user_invocable: bool = Field(True, alias="user-invocable")
    model: str | None = None
    effort: str | int | None = None
    context: Literal["inline", "fork"] | None = None
    paths: str | list[str] | None = None
    version: str | None = None

    @property
    def extra(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


SPEC_FIELDS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})
EXTENSION_FIELDS = frozenset(
    f.alias or name for name, f in Frontmatter.model_fields.items() if (f.alias or name) not in SPEC_FIELDS
)
