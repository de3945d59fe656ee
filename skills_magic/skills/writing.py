"""`%%skill write`: a cell's text becomes one file of a skill in a folder of skills (NAME/SKILL.md, or a file under
NAME/scripts/, NAME/references/ or NAME/assets/), created or replaced, and the whole skill validated at once.

A target never leaves its skill's folder: `..`, an absolute path or a symlink anywhere from NAME down is refused
before anything is written. The folders are walked one at a time through file descriptors that do not follow
symlinks, and the file is written beside its target and renamed over it, so a refused or failed write leaves the
old file as it was. Replacing a file is reported (`WrittenFile.replaced`: the size it had) rather than asked about:
in a notebook run headless nobody is there to answer; `overwrite=False` (`--no-overwrite`) refuses instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass

from skills_magic.errors import SkillNotWritten
from skills_magic.paths import display_path
from skills_magic.skills.skill import Skill
from skills_magic.skills.validate import Verdict, load_skill, validate_folder

WRITE_FOLDER = os.path.join(".skills", "written")  # where `%%skill write` puts skills unless told otherwise
WRITTEN_LABEL = "written"  # the standard source WRITE_FOLDER is, in every session started in its folder
SKILL_FILE = "SKILL.md"
RESOURCE_FOLDERS = ("scripts", "references", "assets")  # the specification's folders: what a cell may write besides SKILL.md
NEW_FILE_MODE = 0o644  # a new file: readable by all (the umask applies), like any file an editor saves
SCRIPT_MODE = 0o755  # a new file that starts with `#!`: it gets its run bit, so a script in any language can run
_NO_FOLLOW = os.O_NOFOLLOW | os.O_DIRECTORY | os.O_RDONLY


class SkillPathRefused(SkillNotWritten):
    """A `%%skill write` target that is not a file inside a skill's folder (a `..`, an absolute path, a symlink)."""


class FileKept(SkillNotWritten):
    """`--no-overwrite` and the file already exists: it was kept, nothing was written."""


@dataclass(frozen=True)
class WrittenFile:
    """One file written into a skill, and the whole skill's verdict after the write."""

    name: str  # the skill's folder name
    folder: str  # the skill's folder
    path: str  # the file written
    replaced: int | None  # the size in bytes of the file this one replaced; None when the file is new
    unchanged: bool  # the file already held exactly this text (nothing was lost)
    verdict: Verdict  # the strict verdict on the whole skill folder
    skill: Skill | None  # the skill as now written (None while it has no loadable SKILL.md)

    @property
    def is_skill_md(self) -> bool:
        return os.path.basename(self.path) == SKILL_FILE and os.path.dirname(self.path) == self.folder


def already_listed(sources, root: str) -> bool:
    """Whether `root` is the standard `written` source among `sources` (each with `label` and `root`): a write there
    is listed without adding a session source."""
    return any(s.label == WRITTEN_LABEL and s.root == os.path.abspath(root) for s in sources)


def skill_file(target: str) -> tuple[str, tuple[str, ...]]:
    """NAME, NAME/SKILL.md or NAME/<scripts|references|assets>/.../FILE split into the skill's name and the file's
    path inside its folder; anything else is refused with the reason."""
    if os.path.isabs(target):
        raise SkillPathRefused(f"{target!r} is an absolute path; write NAME, or NAME/scripts/FILE (references/, assets/) "
                               "inside the skill's folder")
    parts = [part for part in target.replace(os.sep, "/").split("/") if part not in ("", ".")]
    if os.pardir in parts[1:]:
        raise SkillPathRefused(f"{target!r} leaves the skill's folder ('..' is refused)")
    if not parts or parts[0] == os.pardir or not parts[0].strip():
        raise SkillPathRefused(f"{target!r} is not a skill folder name")
    name, inside = parts[0], tuple(parts[1:])
    if not inside or inside == (SKILL_FILE,):
        return name, (SKILL_FILE,)
    if inside[0] not in RESOURCE_FOLDERS:
        raise SkillPathRefused(f"{target!r} is not a skill folder name, nor a file under {name}/scripts/, "
                               f"{name}/references/ or {name}/assets/")
    if len(inside) == 1:
        raise SkillPathRefused(f"{target!r} is a folder; name the file in it ({target.rstrip('/')}/FILE)")
    return name, inside


def write_skill_file(root: str, target: str, text: str, cwd: str, overwrite: bool = True) -> WrittenFile:
    """Write `text` (a final newline added) as the file `target` names in root (see `skill_file`), then validate the
    whole skill. Refusals and failures raise a SkillNotWritten with one sentence, and nothing is written."""
    name, inside = skill_file(target)
    folder = os.path.join(root, name)
    path = os.path.join(folder, *inside)
    shown = display_path(path, cwd)
    content = (text if text.endswith("\n") else text + "\n").encode("utf-8")
    try:
        os.makedirs(root, exist_ok=True)
        descriptors = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
        try:
            for step, part in enumerate((name, *inside[:-1])):
                descriptors.append(_folder(descriptors[-1], part, os.path.join(folder, *inside[:step]), cwd))
            replaced, unchanged = _replace(descriptors[-1], inside[-1], content, overwrite, shown)
        finally:
            for descriptor in descriptors:
                os.close(descriptor)
    except OSError as error:
        raise SkillNotWritten(f"cannot write {shown}: {error.strerror or error}") from None
    verdict = validate_folder(folder)
    skill = load_skill(verdict.skill_md).skill if verdict.skill_md else None
    return WrittenFile(name, folder, path, replaced, unchanged, verdict, skill)


def _folder(parent: int, part: str, path: str, cwd: str) -> int:
    """The folder `part` inside `parent`, made if missing, opened without following a symlink."""
    try:
        os.mkdir(part, dir_fd=parent)
    except FileExistsError:
        pass
    try:
        return os.open(part, _NO_FOLLOW, dir_fd=parent)
    except OSError:
        kind = os.lstat(part, dir_fd=parent).st_mode
        if stat.S_ISLNK(kind):
            raise SkillPathRefused(f"{display_path(path, cwd)} is a symlink, and a skill is never written through one") from None
        if not stat.S_ISDIR(kind):
            raise SkillPathRefused(f"{display_path(path, cwd)} is a file, not a folder") from None
        raise


def _replace(folder: int, file_name: str, content: bytes, overwrite: bool, shown: str) -> tuple[int | None, bool]:
    """Write `content` beside `file_name` and rename it over the old file (kept as it was on any failure); returns
    the old file's size (None: there was none) and whether it held the same bytes."""
    try:
        old = os.lstat(file_name, dir_fd=folder)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISLNK(old.st_mode):
        raise SkillPathRefused(f"{shown} is a symlink, and a skill is never written through one")
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise SkillPathRefused(f"{shown} exists and is not a file")
    if old is not None and not overwrite:
        raise FileKept(f"{shown} already exists ({old.st_size} bytes) and was kept; without --no-overwrite it is replaced")
    unchanged = old is not None and old.st_size == len(content) and _read(folder, file_name) == content
    mode = stat.S_IMODE(old.st_mode) if old is not None else SCRIPT_MODE if content.startswith(b"#!") else NEW_FILE_MODE
    temporary = f".{file_name}.{secrets.token_hex(4)}.writing"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        if old is not None:
            os.chmod(temporary, mode, dir_fd=folder)  # the old file's mode exactly, whatever the umask says
        os.replace(temporary, file_name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
    return (old.st_size if old is not None else None), unchanged


def _read(folder: int, file_name: str) -> bytes:
    handle = os.open(file_name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
    with os.fdopen(handle, "rb") as stream:
        return stream.read()
