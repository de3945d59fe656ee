"""Putting a run's version of one file into the project: where it may land (`Guard`: inside the working folder, never
on a control file or in .git/, never through a link that leads out), whether the file there moved on since the run
started, and the write itself: atomic (a temporary file in the same folder, then a rename), with the permissions the
file has on disk (a new one: as the umask gives) and the run bit the run left on it."""

from __future__ import annotations

import os
import stat
import tempfile
import uuid
from collections.abc import Sequence

from skills_magic.errors import ChangeError
from skills_magic.safety.working.runfolder import OWN_FOLDER
from skills_magic.safety.working.safefiles import TEMP_PREFIX, clean_relative, no_follow, remove_quietly, under

CONTROL_NAMES = ("skills-policy.yaml", "skills.lock", OWN_FOLDER)  # protected even when the caller names none
GIT_FOLDER = ".git"  # git runs hooks and reads config from there: a run's write there would run code later
DEFAULT_UMASK = 0o022  # when the process's umask cannot be read
COPY_BLOCK_BYTES = 1024 * 1024  # a run's file is copied in blocks of this size (a 1 GB output is never read whole)

REFUSED_CONTROL = "a control file of the project (skills-policy.yaml, skills.lock, .skills/): a run never writes it"
REFUSED_GIT = "inside .git/ (git runs its hooks and reads its config from there): let git itself make such changes"
REFUSED_OUTSIDE = "outside the working folder"
REFUSED_LINK = "a symbolic link whose target leaves the working folder"
REFUSED_SINCE = "changed on disk since the run started"


class Guard:
    """Where a change may land: inside the working folder (real paths), never on a control file or in .git/."""

    def __init__(self, work: str, protected: Sequence[str]):
        self.work = work
        names = [os.path.join(work, name) for name in CONTROL_NAMES]
        self.protected = list(dict.fromkeys(
            form for p in [*names, *protected] for form in (os.path.abspath(p), os.path.realpath(p))))
        self.git = os.path.join(work, GIT_FOLDER)

    def destination(self, path: str, link: str | None = None) -> tuple[str | None, str | None]:
        """(where the change of `path` lands on disk, None) or (None, why it may not); `link`: the change is a
        symbolic link to this target."""
        relative = clean_relative(path)
        if relative is None or relative != path:
            return None, REFUSED_OUTSIDE
        lexical = os.path.join(self.work, *relative.split("/"))
        parent = os.path.realpath(os.path.dirname(lexical))
        if not under(parent, self.work):
            return None, f"{REFUSED_OUTSIDE} (a folder on its way is a symbolic link leading out)"
        real = os.path.join(parent, os.path.basename(lexical))
        if real == self.work:
            return None, REFUSED_OUTSIDE
        if any(under(form, p) for form in (lexical, real) for p in self.protected):
            return None, REFUSED_CONTROL
        if under(lexical, self.git) or under(real, self.git):
            return None, REFUSED_GIT
        if link is not None:
            target = link if os.path.isabs(link) else os.path.join(parent, link)
            if not under(os.path.realpath(target), self.work):
                return None, f"{REFUSED_LINK} (to {link})"
        return real, None


def changed_since(kind: str, destination: str, started_ns: int) -> str | None:
    """Why a change of `kind` may no longer be applied at `destination` (the file there moved on since the run
    started), or None."""
    try:
        disk = os.lstat(destination)
    except OSError:
        disk = None
    if kind == "added":
        return None if disk is None else f"{REFUSED_SINCE} (a file is there now)"
    if disk is None:
        return f"{REFUSED_SINCE} (it is no longer there)"
    if disk.st_mtime_ns > started_ns:
        return REFUSED_SINCE
    return None


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return DEFAULT_UMASK


def _mode(destination: str, executable: bool) -> int:
    """The file's permissions as they are on disk (new: as the umask gives), with the run bit the run left on it."""
    try:
        disk = os.lstat(destination)
        base = stat.S_IMODE(disk.st_mode) if stat.S_ISREG(disk.st_mode) else 0o666 & ~_umask()
    except OSError:
        base = 0o666 & ~_umask()
    base &= 0o777
    return base | ((base & 0o444) >> 2) if executable else base & ~0o111


def write_version(destination: str, work: str, path: str, file: str | None, link: str | None = None,
                  executable: bool = False) -> None:
    """Put the run's version of `path` (its bytes in `file`, or a symbolic link to `link`) at `destination`
    atomically: a temporary file in the same folder, then a rename."""
    parent = os.path.dirname(destination)
    os.makedirs(parent, exist_ok=True)
    if not under(os.path.realpath(parent), work):  # a folder made on the way must not have led elsewhere
        raise ChangeError(f"{path} would be written outside the working folder")
    if link is not None:
        temporary = os.path.join(parent, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        os.symlink(link, temporary)
        try:
            os.replace(temporary, destination)
        except BaseException:
            remove_quietly(temporary)
            raise
        return
    mode = _mode(destination, executable)
    handle, temporary = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=parent)
    try:
        with os.fdopen(handle, "wb") as out, open(file or "", "rb", opener=no_follow) as source:
            while block := source.read(COPY_BLOCK_BYTES):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, destination)
    except BaseException:
        remove_quietly(temporary)
        raise
