"""Comparing two versions of a file, as a run's change shows them: whether the bytes are the same (read in blocks, so
a 1 GB output is never read whole), and a unified diff when both sides are small UTF-8 text."""

from __future__ import annotations

import difflib

from skills_magic.safety.working.safefiles import no_follow

DIFF_MAX_BYTES = 64 * 1024  # each side of a diff: a larger file is data, and its diff would flood the cell
DIFF_MAX_LINES = 400  # a longer diff is cut (and says so): the file itself is one `read_text()` away
COMPARE_BLOCK_BYTES = 1024 * 1024  # files are compared in blocks of this size (a 1 GB output is never read whole)


def same_bytes(a: str, b: str, size: int) -> bool:
    """Whether the files `a` and `b` (`size` bytes, the size of both) hold the same bytes."""
    with open(a, "rb", opener=no_follow) as first, open(b, "rb", opener=no_follow) as second:
        while size > 0:
            block = first.read(COMPARE_BLOCK_BYTES)
            if block != second.read(COMPARE_BLOCK_BYTES):
                return False
            if not block:
                break
            size -= len(block)
        return True


def _text_of(path: str | None, size: int) -> str | None:
    """The file's text when it is small UTF-8 text ("" for no file), else None."""
    if path is None:
        return ""
    if size > DIFF_MAX_BYTES:
        return None
    try:
        with open(path, "rb", opener=no_follow) as handle:
            data = handle.read(DIFF_MAX_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return None if "\0" in text or len(data) > DIFF_MAX_BYTES else text


def unified_diff(old: str, new: str, path: str, added: bool = False, deleted: bool = False) -> str:
    """A unified diff of two texts (`--- a/PATH`, `+++ b/PATH`), marking a last line with no newline as git does,
    cut at DIFF_MAX_LINES lines (and saying so)."""
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     "/dev/null" if added else f"a/{path}", "/dev/null" if deleted else f"b/{path}"):
        if line.endswith("\n"):
            lines.append(line)
        else:
            lines += [line + "\n", "\\ No newline at end of file\n"]
    if len(lines) > DIFF_MAX_LINES:
        lines = lines[:DIFF_MAX_LINES] + [f"[diff cut: {len(lines) - DIFF_MAX_LINES:,} more lines not shown]\n"]
    return "".join(lines)


def file_diff(kind: str, path: str, old_file: str | None, old_size: int, new_file: str | None, new_size: int) -> str | None:
    """The diff of a change of `kind` (added, changed, deleted) from `old_file` to `new_file` (None: no file on that
    side); None when a side is not small UTF-8 text."""
    old, new = _text_of(old_file, old_size), _text_of(new_file, new_size)
    if old is None or new is None:
        return None
    return unified_diff(old, new, path, added=kind == "added", deleted=kind == "deleted")

