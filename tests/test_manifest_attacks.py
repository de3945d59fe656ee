"""Run exactly the reviewed bytes: reading a skill never opens anything but a regular file (a FIFO, a device, a
socket or a symlink leaving the skill is refused with one line naming it, at review, at check and at copy), and a run
uses a private copy whose bytes were hashed as they were copied, so nothing swapped on disk afterwards can run."""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import os
import py_compile
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from notebook_setup import notebook_folder, registered_magics
from skillfiles import reviewed_skill, write_file
from skills_magic.skills.catalog import Source
from skills_magic.safety.manifest import (
    LOCK_FILE,
    Manifest,
    ManifestMismatch,
    PrivateCopy,
    ReviewRefused,
    UnsafeFile,
    private_copy,
    skill_files,
)
from skills_magic.session import SkillsSession

REPO = Path(__file__).resolve().parent.parent
CHILD_SECONDS = 30  # a scan that works takes well under a second; one that hangs is killed here, not the suite
RACE_COPIES = (200, 5000)  # at least this many copies while the bytes flip, and at most this many to see both outcomes
RACE_OUTCOMES = 10  # copies of each outcome (refused, reviewed bytes) that show the race really happened
NEVER_READ = "special files are never read; remove it"
OUTSIDE = "outside the skill folder: links leaving the skill are never followed; copy what it points to into the skill instead"
REVIEWED = b"print('reviewed')\n"
EVIL = b"print('evil!!!!')\n"  # as long as REVIEWED: a write in place can tear a read between the two

# each runs in a child Python, so a read that blocks forever fails one test instead of hanging the suite
CHECK = """import sys
from skills_magic.safety.manifest import Manifest, ManifestMismatch
try:
    print("passed" if Manifest(sys.argv[1]).check("x", sys.argv[2]) else "not reviewed")
except ManifestMismatch as error:
    print(f"{type(error).__name__}: {error}")
"""
REVIEW = """import sys
from skills_magic.skills.catalog import Source
from skills_magic.errors import SkillsMagicError
from skills_magic.session import SkillsSession
session = SkillsSession(sources=[Source("session", sys.argv[1] + "/skills", explicit=True)], cwd=sys.argv[1])
try:
    print("written" if session.review("x", confirm=lambda: True)[2] else "not written")
except SkillsMagicError as error:
    print(f"{type(error).__name__}: {error}")
"""
COPY = """import sys
from skills_magic.safety.manifest import Manifest, ManifestMismatch
try:
    print(sorted(Manifest(sys.argv[1]).copy("x", sys.argv[2], sys.argv[3]).files))
except ManifestMismatch as error:
    print(f"{type(error).__name__}: {error}")
"""
# replaces scripts/run.py by a FIFO just before the scan opens it: after the lstat said it was a regular file
SWAP_BEFORE_OPEN = """import os, sys
real_open = os.open
def swap_then_open(path, flags, *args, **kwargs):
    if str(path).endswith("run.py") and not flags & (os.O_WRONLY | os.O_RDWR):
        where = kwargs.get("dir_fd")
        os.unlink(path, dir_fd=where)
        os.mkfifo(path, dir_fd=where)
    return real_open(path, flags, *args, **kwargs)
os.open = swap_then_open
"""


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def in_a_child(code: str, *args: object) -> str:
    """Run `code` in a fresh Python with `args` as argv; its stdout. Killed, and the test failed, if it hangs."""
    try:
        done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                              timeout=CHILD_SECONDS, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the skill did not finish within {CHILD_SECONDS} s: it hung on a file that is not regular")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    return notebook_folder(monkeypatch, tmp_path, lock=None)


@pytest.fixture
def folder(place) -> Path:
    """Skill `x`: SKILL.md, an executable scripts/run.py, references/notes.md."""
    return reviewed_skill(place / "skills", REVIEWED.decode(), mode=0o755)


@pytest.fixture
def outside(place) -> Path:
    """A folder beside the skills with a copy of run.py's exact bytes, and a package an import could find."""
    there = place / "outside"
    write_file(there, "run.py", REVIEWED.decode())
    write_file(there, "lib/__init__.py", "WHO = 'outside'\n")
    return there


def new_session(place: Path) -> SkillsSession:
    return SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))


def review(place: Path) -> SkillsSession:
    session = new_session(place)
    assert session.review("x", confirm=lambda: True)[2]
    return session


def lock(place: Path) -> Manifest:
    return Manifest(str(place / LOCK_FILE))


def open_fds() -> set[str]:
    """The process's open descriptors (as a set: an earlier test's socket closed by the garbage collector meanwhile
    is not this test's business, a descriptor this test leaves open is)."""
    gc.collect()
    return {entry for entry in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{entry}")}


# --- special files: refused with one line, never opened, never waited on ----------------------------------------


def plant_fifo(skill: Path) -> None:
    os.mkfifo(skill / "scripts" / "pipe")


def plant_socket(skill: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(os.path.relpath(skill / "scripts" / "pipe"))  # relative: a socket path is at most 108 bytes


def plant_link_to_dev_zero(skill: Path) -> None:
    (skill / "scripts" / "pipe").symlink_to("/dev/zero")


def plant_link_to_a_fifo_inside(skill: Path) -> None:
    os.mkfifo(skill / "scripts" / "z-fifo")
    (skill / "scripts" / "pipe").symlink_to("z-fifo")


SPECIAL = {
    "fifo": (plant_fifo, f"x/scripts/pipe is a FIFO: {NEVER_READ}"),
    "socket": (plant_socket, f"x/scripts/pipe is a socket: {NEVER_READ}"),
    "link to /dev/zero": (plant_link_to_dev_zero, f"x/scripts/pipe is a symlink to /dev/zero, {OUTSIDE}"),
    "link to a fifo inside": (plant_link_to_a_fifo_inside, f"x/scripts/pipe is a symlink to scripts/z-fifo, a FIFO: {NEVER_READ}"),
}


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_review_refuses_a_skill_holding_a_special_file_and_records_nothing(folder, place, kind):
    plant, line = SPECIAL[kind]
    plant(folder)
    assert in_a_child(REVIEW, place) == f"ReviewRefused: {line}; nothing was recorded in skills.lock"
    assert not (place / LOCK_FILE).exists()
    assert not [r for r in new_session(place).audit() if r["event"] == "review"]


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_special_file_planted_after_review_refuses_the_check(folder, place, kind):
    review(place)
    plant, line = SPECIAL[kind]
    plant(folder)
    assert in_a_child(CHECK, place / LOCK_FILE, folder) == f"UnsafeFile: {line}"


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_special_file_refuses_the_private_copy_and_leaves_no_copy(folder, place, kind):
    review(place)
    plant, line = SPECIAL[kind]
    plant(folder)
    assert in_a_child(COPY, place / LOCK_FILE, folder, place / "copy") == f"UnsafeFile: {line}"
    assert not (place / "copy").exists()


def test_a_file_swapped_for_a_fifo_between_its_lstat_and_its_open_is_refused_without_waiting(folder, place):
    review(place)
    assert (in_a_child(SWAP_BEFORE_OPEN + CHECK, place / LOCK_FILE, folder)
            == f"UnsafeFile: x/scripts/run.py is a FIFO: {NEVER_READ}")
    assert stat.S_ISFIFO(os.lstat(folder / "scripts" / "run.py").st_mode)  # the swap really happened


def test_a_refused_scan_leaves_no_file_open(folder, place):
    write_file(folder, "scripts/deep/er/ok.txt", "fine\n")
    session = review(place)
    (folder / "scripts" / "deep" / "er" / "zz").symlink_to("nowhere")  # refused with three folders open
    before = open_fds()
    for _ in range(3):
        with pytest.raises(UnsafeFile):
            session.manifest.check("x", str(folder))
        with pytest.raises(UnsafeFile):
            session.manifest.copy("x", str(folder), str(place / "copy"))
    assert open_fds() - before == set()


# --- symlinks ------------------------------------------------------------------------------------------------


def test_a_pinned_file_replaced_by_a_link_outside_with_the_same_bytes_is_refused(folder, place, outside):
    session = review(place)
    script = folder / "scripts" / "run.py"
    script.unlink()
    script.symlink_to(outside / "run.py")  # same bytes: only following the link could let it pass
    with pytest.raises(UnsafeFile) as refused:
        session.manifest.check("x", str(folder))
    assert str(refused.value) == f"x/scripts/run.py is a symlink to {outside / 'run.py'}, {OUTSIDE}"
    result = session.run_script("x", "scripts/run.py")
    assert result.stop_reason == "denied"


def test_a_symlinked_folder_leading_outside_added_after_review_is_refused(folder, place, outside):
    session = review(place)
    (folder / "scripts" / "lib").symlink_to(outside / "lib", target_is_directory=True)
    with pytest.raises(UnsafeFile, match=f"^x/scripts/lib is a symlink to {outside / 'lib'}, outside the skill folder"):
        session.manifest.check("x", str(folder))
    with pytest.raises(UnsafeFile, match="^x/scripts/lib is a symlink to"):
        session.manifest.copy("x", str(folder), str(place / "copy"))


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_review_refuses_a_symlink_leading_outside(folder, place, outside, link):
    if link == "file":
        (folder / "data.txt").symlink_to(outside / "run.py")
    else:
        (folder / "data").symlink_to(outside / "lib", target_is_directory=True)
    with pytest.raises(ReviewRefused) as refused:
        new_session(place).review("x", confirm=lambda: True)
    name, target = ("data.txt", outside / "run.py") if link == "file" else ("data", outside / "lib")
    assert str(refused.value) == f"x/{name} is a symlink to {target}, {OUTSIDE}; nothing was recorded in skills.lock"
    assert not (place / LOCK_FILE).exists()


@pytest.mark.parametrize("target, what", [("missing.txt", "a symlink to missing.txt, which does not exist"),
                                          ("loop", "a symlink loop (loop)")])
def test_a_dangling_or_looping_link_is_refused(folder, place, target, what):
    (folder / "loop").symlink_to(target)
    with pytest.raises(ReviewRefused) as refused:
        new_session(place).review("x", confirm=lambda: True)
    assert str(refused.value).startswith(f"x/loop is {what}: ")


def test_a_link_to_a_file_inside_is_pinned_and_copied_as_that_files_bytes(folder, place):
    (folder / "scripts" / "alias.py").symlink_to("run.py")
    session = review(place)
    assert session.manifest.pinned("x")["scripts/alias.py"] == sha(REVIEWED)
    copy = session.manifest.copy("x", str(folder), str(place / "copy"))
    alias = place / "copy" / "scripts" / "alias.py"
    assert not alias.is_symlink() and alias.read_bytes() == REVIEWED and copy.files["scripts/alias.py"] == sha(REVIEWED)
    assert stat.S_IMODE(alias.stat().st_mode) == 0o555  # the run bits of the file it points to


def test_a_symlinked_folder_inside_is_neither_pinned_nor_copied(folder, place):
    (folder / "scripts" / "more").symlink_to("../references", target_is_directory=True)
    session = review(place)
    assert sorted(session.manifest.pinned("x")) == ["SKILL.md", "references/notes.md", "scripts/run.py"]
    session.manifest.copy("x", str(folder), str(place / "copy"))
    assert not os.path.lexists(place / "copy" / "scripts" / "more")


def test_a_symlinked_folder_added_after_review_is_not_in_the_copy(folder, place):
    session = review(place)
    (folder / "scripts" / "lib").symlink_to("../references", target_is_directory=True)  # `import lib` would find it
    assert session.manifest.check("x", str(folder)) is True  # not pinned, so not a difference...
    session.manifest.copy("x", str(folder), str(place / "copy"))
    assert sorted(str(p.relative_to(place / "copy")) for p in (place / "copy").rglob("*")) == [  # ...and not copied
        "SKILL.md", "references", "references/notes.md", "scripts", "scripts/run.py"]


# --- what Python would use at run time --------------------------------------------------------------------------


def test_a_planted_pyc_is_used_from_the_skill_folder_but_is_not_in_the_copy(folder, place):
    write_file(folder, "scripts/main.py", "import helper\nprint(helper.WHO)\n")
    helper = write_file(folder, "scripts/helper.py", "WHO = 'reviewed'\n")
    session = review(place)
    evil = write_file(place, "evil/helper.py", "WHO = 'planted'\n")
    # an unchecked-hash pyc is used whatever the source says: the planted bytes run instead of the reviewed ones
    py_compile.compile(str(evil), cfile=importlib.util.cache_from_source(str(helper)),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert session.manifest.check("x", str(folder)) is True  # __pycache__ is not pinned: the check cannot see it
    python = [sys.executable, "-E", "-s"]  # -E: no PYTHONPYCACHEPREFIX moving the caches elsewhere
    assert subprocess.run([*python, str(folder / "scripts" / "main.py")], capture_output=True, text=True,
                          timeout=CHILD_SECONDS).stdout == "planted\n"
    copy = session.manifest.copy("x", str(folder), str(place / "copy"))
    assert not any("__pycache__" in path or path.endswith(".pyc") for path in copy.files)
    assert not (place / "copy" / "scripts" / "__pycache__").exists()
    assert subprocess.run([*python, str(place / "copy" / "scripts" / "main.py")], capture_output=True, text=True,
                          timeout=CHILD_SECONDS).stdout == "reviewed\n"


# --- the private copy -----------------------------------------------------------------------------------------


def test_the_copy_holds_exactly_the_pinned_files_read_only_with_their_run_bits(folder, place):
    write_file(folder, "scripts/__pycache__/run.cpython-311.pyc", "cache")
    write_file(folder, ".git/HEAD", "ref: refs/heads/main\n")
    write_file(folder, "scripts/old.pyc", "cache")
    session = review(place)
    copy = session.manifest.copy("x", str(folder), str(place / "copy"))
    assert isinstance(copy, PrivateCopy) and copy.folder == str(place / "copy") and copy.reviewed
    assert copy.files == session.manifest.pinned("x") == {f.path: f.sha256 for f in skill_files(str(folder))}
    found = {str(p.relative_to(place / "copy")): p for p in (place / "copy").rglob("*") if not p.is_dir()}
    assert sorted(found) == ["SKILL.md", "references/notes.md", "scripts/run.py"]
    assert all(found[path].read_bytes() == (folder / path).read_bytes() for path in found)
    assert stat.S_IMODE(found["scripts/run.py"].stat().st_mode) == 0o555
    assert stat.S_IMODE(found["references/notes.md"].stat().st_mode) == 0o444
    assert stat.S_IMODE((place / "copy" / "scripts").stat().st_mode) == 0o700


def test_a_never_reviewed_skill_is_copied_as_found(folder, place):
    copy = private_copy("x", str(folder), str(place / "copy"), None)
    assert not copy.reviewed and copy.files == {f.path: f.sha256 for f in skill_files(str(folder))}


def change_the_script(folder: Path) -> None:
    write_file(folder, "scripts/run.py", "print('changed')\n")


def add_a_helper(folder: Path) -> None:
    write_file(folder, "scripts/helper.py", "print('helper')\n")


def remove_the_notes(folder: Path) -> None:
    (folder / "references" / "notes.md").unlink()


@pytest.mark.parametrize("edit", [change_the_script, add_a_helper, remove_the_notes])
def test_a_copy_of_a_skill_differing_from_its_review_is_refused_as_the_check_refuses_it(folder, place, edit):
    session = review(place)
    edit(folder)
    with pytest.raises(ManifestMismatch) as checked:
        session.manifest.check("x", str(folder))
    with pytest.raises(ManifestMismatch) as copied:
        private_copy("x", str(folder), str(place / "copy"), session.manifest.pinned("x"))
    assert str(copied.value) == str(checked.value)
    assert not (place / "copy").exists()


def test_a_refused_copy_into_a_folder_it_was_given_leaves_it_empty(folder, place):
    session = review(place)
    change_the_script(folder)
    (place / "copy").mkdir()
    with pytest.raises(ManifestMismatch):
        session.manifest.copy("x", str(folder), str(place / "copy"))
    assert list((place / "copy").iterdir()) == []


def test_a_copy_refuses_a_destination_that_is_not_empty(folder, place):
    write_file(place, "copy/stale.py", "print('stale')\n")
    with pytest.raises(FileExistsError, match="must be empty"):
        private_copy("x", str(folder), str(place / "copy"), None)


def test_the_source_verification_sample_copies_with_the_digests_a_review_records(sample_skills, place):
    skill = sample_skills / "source-verification"
    pinned = {f.path: f.sha256 for f in skill_files(str(skill))}
    copy = private_copy("source-verification", str(skill), str(place / "copy"), pinned)
    assert copy.files == pinned and len(pinned) == 8


def test_bytes_flipped_on_disk_while_copying_never_reach_a_copy(folder, place):
    """A thread flips run.py between the reviewed and an evil version (in place and by rename) as fast as it can;
    every copy is refused or holds exactly the reviewed bytes, and both happen, so the race was real."""
    session = review(place)
    pinned = session.manifest.pinned("x")
    script, staging = folder / "scripts" / "run.py", place / "staging"
    staging.mkdir()
    stop = threading.Event()

    def flip() -> None:
        flips = 0
        while not stop.is_set():
            data = EVIL if flips % 2 == 0 else REVIEWED
            if flips % 4 < 2:
                with open(script, "r+b") as handle:  # in place: a read can see half of each
                    handle.write(data)
            else:
                (staging / "run.py").write_bytes(data)
                os.replace(staging / "run.py", script)  # a new file under the same name
            flips += 1

    flipper = threading.Thread(target=flip, daemon=True)
    refused = copied = 0
    flipper.start()
    try:
        for attempt in range(RACE_COPIES[1]):
            if attempt >= RACE_COPIES[0] and min(refused, copied) >= RACE_OUTCOMES:
                break
            destination = place / "copies" / str(attempt)
            try:
                copy = private_copy("x", str(folder), str(destination), pinned)
            except ManifestMismatch as error:
                assert str(error).startswith("x/scripts/run.py is not the reviewed file: reviewed sha256 ")
                assert not destination.exists()
                refused += 1
                continue
            assert (destination / "scripts" / "run.py").read_bytes() == REVIEWED
            assert copy.files["scripts/run.py"] == sha(REVIEWED)
            copied += 1
    finally:
        stop.set()
        flipper.join()
    assert refused >= RACE_OUTCOMES and copied >= RACE_OUTCOMES, (refused, copied)


# --- %skills review -----------------------------------------------------------------------------------------


def test_the_review_magic_refuses_in_one_line_naming_the_file(ip, folder, place, outside, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "path")
    monkeypatch.setenv("SKILLS_MAGIC_PATH", str(place / "skills"))
    (folder / "scripts" / "lib").symlink_to(outside / "lib", target_is_directory=True)
    with registered_magics(ip), pytest.raises(UsageError) as refused:
        ip.run_line_magic("skills", "review x --yes")
    assert str(refused.value) == (f"x/scripts/lib is a symlink to {outside / 'lib'}, {OUTSIDE}; "
                                  "nothing was recorded in skills.lock")
    assert not (place / LOCK_FILE).exists()
