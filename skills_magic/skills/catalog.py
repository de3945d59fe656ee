"""Finding skills: sources in precedence order, a bounded recursive search, collisions, and a stat cache.

Sources, first wins on a name collision: skills added in the session, then the skills `%%skill write` wrote in
this folder (`./.skills/written`, so they outlive a restart), `SKILLS_MAGIC_PATH` / IPython config folders, the
project (`./.agents/skills`, `./.claude/skills`, `./skills`), the user (`~/.agents/skills`, `~/.claude/skills`), and
the sample skills bundled with the package, and last the skills a model wrote (`./.skills/learned/skills`,
records/learned.py), so a learned skill never hides another. Every shadowed skill gets a `collision`
diagnostic; the same file reached twice (symlinks) is listed once. A warm scan is a stat pass: folders and files
whose (size, mtime) did not change are not read again.
"""

from __future__ import annotations

import difflib
import os
import stat as stat_module
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from skills_magic.errors import InvalidSetting, SkillNotFound, SkillSkipped
# the walk's limits and `find_skill_files` live in find.py, and are still importable from here
from skills_magic.skills.find import MAX_SEARCH_DEPTH, SKIPPED_FOLDERS, Finder, find_skill_files  # noqa: F401
from skills_magic.skills.skill import Diagnostic, Skill
from skills_magic.skills.validate import LoadResult, load_skill
from skills_magic.skills.writing import WRITE_FOLDER, WRITTEN_LABEL

PROJECT_FOLDERS = (".agents/skills", ".claude/skills", "skills")
USER_FOLDERS = ("~/.agents/skills", "~/.claude/skills")
PATH_VARIABLE = "SKILLS_MAGIC_PATH"
SOURCES_VARIABLE = "SKILLS_MAGIC_SOURCES"  # e.g. "project,bundled": a notebook that must re-run anywhere leaves out ~
CLOSE_MATCHES = 3  # names suggested for a name the catalog does not have
LEARNED_FOLDER = os.path.join(".skills", "learned", "skills")  # what `manage_skill` wrote (records/learned.py)
LEARNED_LABEL = "learned"  # last of all: a skill a model wrote never hides one a person wrote or shipped
STANDARD_LABELS = (WRITTEN_LABEL, "path", "project", "user", "bundled", LEARNED_LABEL)


@dataclass(frozen=True)
class Source:
    """A folder searched for skills. `label` groups sources in listings (session, path, project, user, bundled)."""

    label: str
    root: str
    explicit: bool = False  # added by the user: hidden subfolders (`.curated/`) are searched too


def bundled_skills_folder() -> str:
    """The sample skills shipped with the package (inside the wheel, or the repository's in a checkout)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "sample_skills", package.parent / "sample-skills"):
        if candidate.is_dir():
            return str(candidate)
    return str(package / "sample_skills")


def default_sources(cwd: str | None = None, home: str | None = None, environ=None, extra: list[str] | tuple = ()) -> list[Source]:
    """The standard sources in precedence order (without session-added ones). What `%%skill write` wrote in this
    folder comes first, right after the session's own additions, as in the session that wrote it: a restart changes
    no skill's winner."""
    cwd = cwd or os.getcwd()
    environ = os.environ if environ is None else environ
    home = home or os.path.expanduser("~")
    sources = [Source(WRITTEN_LABEL, os.path.abspath(os.path.join(cwd, WRITE_FOLDER)))]
    sources += [Source("path", os.path.abspath(os.path.join(cwd, p)), True) for p in environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    sources += [Source("path", os.path.abspath(os.path.join(cwd, os.path.expanduser(p))), True) for p in extra]
    sources += [Source("project", os.path.join(cwd, p)) for p in PROJECT_FOLDERS]
    sources += [Source("user", os.path.join(home, p[2:])) for p in USER_FOLDERS]
    sources.append(Source("bundled", bundled_skills_folder()))
    sources.append(Source(LEARNED_LABEL, os.path.abspath(os.path.join(cwd, LEARNED_FOLDER))))
    wanted = [label.strip() for label in environ.get(SOURCES_VARIABLE, "").split(",") if label.strip()]
    unknown = set(wanted) - set(STANDARD_LABELS)
    if unknown:
        raise InvalidSetting(f"{SOURCES_VARIABLE} names unknown sources {sorted(unknown)}; use some of {', '.join(STANDARD_LABELS)}")
    return [s for s in sources if s.label in wanted] if wanted else sources


@dataclass(frozen=True)
class Shadowed:
    skill: Skill
    winner: Skill


@dataclass(frozen=True)
class CatalogScan:
    """One look at all sources: the visible skills in precedence order and everything else that was found."""

    sources: tuple[Source, ...]
    skills: tuple[Skill, ...]  # visible skills, grouped by source in precedence order
    shadowed: tuple[Shadowed, ...]
    skipped: tuple[LoadResult, ...]  # SKILL.md files that could not be loaded
    diagnostics: tuple[Diagnostic, ...]  # every diagnostic, per-skill ones included
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # SKILL.md files found per (label, root)
    files_found: int = 0

    def get(self, name: str) -> Skill | None:
        return self._by_name.get(name)

    @property
    def _by_name(self) -> dict[str, Skill]:
        cached = self.__dict__.get("_names")
        if cached is None:
            cached = {s.name: s for s in self.skills}
            object.__setattr__(self, "_names", cached)
        return cached

    def names(self) -> list[str]:
        return [s.name for s in self.skills]

    def skipped_named(self, name: str) -> LoadResult | None:
        """The skipped SKILL.md a name refers to (by its folder's name: its frontmatter could not be trusted)."""
        wanted = unicodedata.normalize("NFKC", name)
        return next((r for r in self.skipped if skipped_name(r) == wanted), None)

    def folder_of(self, name: str) -> str | None:
        """The folder of the skill `name`: a listed one's, else a skipped one's; None when there is neither."""
        found = self.get(name)
        if found is not None:
            return found.folder
        skipped = self.skipped_named(name)
        return os.path.dirname(skipped.path) if skipped is not None else None

    def not_found(self, name: str, show: Callable[[str], str] = os.path.basename) -> SkillNotFound:
        """The error for a name the catalog does not list: SkillSkipped (why, with file and line, paths as `show`
        gives them) when a SKILL.md of that name was skipped, else SkillNotFound naming close matches."""
        skipped = self.skipped_named(name)
        if skipped is None:
            return SkillNotFound(name, difflib.get_close_matches(name, self.names(), n=CLOSE_MATCHES))
        return SkillSkipped(name, skip_reasons(skipped, show))


def skipped_name(result: LoadResult) -> str:
    """The name a skipped SKILL.md goes by: its folder's, as a client names a skill whose frontmatter it cannot use."""
    return unicodedata.normalize("NFKC", os.path.basename(os.path.dirname(result.path)))


def skip_reasons(result: LoadResult, show: Callable[[str], str] = os.path.basename) -> list[str]:
    """Why a SKILL.md was skipped: its errors as `FILE:LINE: [code] message` (paths as `show` gives them)."""
    errors = [d for d in result.diagnostics if d.severity == "error"] or list(result.diagnostics)
    return [f"{show(d.path)}{'' if d.line is None else f':{d.line}'}: [{d.code}] {d.message}" for d in errors]


@dataclass(frozen=True)
class SourceStatus:
    """A source as `%skills sources` shows it: whether its folder exists and how many skills it gave."""

    source: Source
    exists: bool
    skills: int


def source_statuses(sources: list[Source], scan: CatalogScan) -> list[SourceStatus]:
    return [SourceStatus(s, os.path.isdir(s.root), scan.counts.get((s.label, s.root), 0)) for s in sources]


def _relative_to_source(skill: Skill) -> str:
    # messages carry no absolute paths, so outputs are the same on every machine
    return os.path.relpath(skill.folder, os.path.dirname(skill.source_root) or "/")


class Catalog:
    """The skills visible in one session. `scan()` is cheap when nothing changed on disk."""

    def __init__(self, sources: list[Source] | None = None):
        self.sources: list[Source] = list(sources) if sources is not None else default_sources()
        self._finder = Finder()
        # path -> ((size, mtime, dev, ino), (result, (dev, ino)))
        self._files: dict[str, tuple[tuple[int, int, int, int], tuple[LoadResult, tuple[int, int] | None]]] = {}
        self._last: tuple[tuple, CatalogScan] | None = None

    def add(self, path: str | os.PathLike, label: str = "session") -> Source:
        """Add a folder (a skill or a collection) ahead of the standard sources, after earlier additions."""
        root = os.path.abspath(os.fspath(path))
        if os.path.basename(root).lower() == "skill.md":
            root = os.path.dirname(root)
        source = Source(label, root, explicit=True)
        if source in self.sources:
            return source
        position = sum(1 for s in self.sources if s.label == label)
        self.sources.insert(position, source)
        return source

    def _load(self, path: str) -> tuple[LoadResult, tuple[int, int] | None] | None:
        """The load result of one SKILL.md (cached by size, mtime and inode); None when the file is gone."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if not os.path.lexists(path):
                return None
            return load_skill(path), None  # a dangling symlink: reported by the loader
        except OSError:
            return load_skill(path), None
        key = (st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino)
        cached = self._files.get(path)
        if cached is not None and cached[0] == key:  # the warm path: one stat, one comparison
            return cached[1]
        # a folder named SKILL.md (or another non-file) has no identity to de-duplicate by
        identity = (st.st_dev, st.st_ino) if stat_module.S_ISREG(st.st_mode) else None
        loaded = (load_skill(path), identity)
        self._files[path] = (key, loaded)
        return loaded

    def _load_source(self, source: Source, diagnostics: list[Diagnostic]) -> list:
        for retry in (False, True):
            found: list[Diagnostic] = []
            loaded = []
            vanished = False
            for path in self._finder.find(source.root, source.explicit, found):
                result = self._load(path)
                if result is None:  # gone since the last search (renamed, deleted): search this source again
                    vanished = True
                    if not retry:
                        break
                    continue
                loaded.append((source, path, *result))
            if not vanished or retry:
                diagnostics.extend(found)
                return loaded
            self._finder.forget(source.root, source.explicit)
        raise AssertionError("unreachable")

    def scan(self) -> CatalogScan:
        """Look at every source; returns the previous scan object when nothing changed."""
        diagnostics: list[Diagnostic] = []
        results = []
        for source in self.sources:
            if os.path.isdir(source.root):
                results += self._load_source(source, diagnostics)
        fingerprint = (tuple(self.sources), tuple((s.root, p, id(r), i) for s, p, r, i in results), tuple(diagnostics))
        if self._last is not None and self._last[0] == fingerprint:
            return self._last[1]
        scan = self._assemble(results, diagnostics)
        self._last = (fingerprint, scan)
        return scan

    def _assemble(self, results, walk_diagnostics: list[Diagnostic]) -> CatalogScan:
        winners: dict[str, Skill] = {}
        seen_files: dict[tuple[int, int], str] = {}
        visible: list[Skill] = []
        shadowed: list[Shadowed] = []
        skipped: list[LoadResult] = []
        diagnostics = list(walk_diagnostics)
        counts: dict[tuple[str, str], int] = {}
        for source, path, result, identity in results:
            key = (source.label, source.root)  # one folder may be two sources (session and project): count each
            counts[key] = counts.get(key, 0) + 1
            if identity is not None:
                if identity in seen_files:
                    diagnostics.append(Diagnostic("duplicate", f"the same file was already found in {seen_files[identity]}; listed once", path))
                    continue
                seen_files[identity] = source.label
            diagnostics.extend(result.diagnostics)
            if result.skill is None:
                skipped.append(result)
                continue
            skill = result.skill.with_source(source.label, source.root)
            winner = winners.get(skill.name)
            if winner is not None:
                shadowed.append(Shadowed(skill, winner))
                diagnostics.append(
                    Diagnostic(
                        "collision",
                        f"skill {skill.name!r} from {source.label} is hidden by the one from "
                        f"{winner.source} ({_relative_to_source(winner)})",
                        path,
                    )
                )
                continue
            winners[skill.name] = skill
            visible.append(skill)
        return CatalogScan(
            sources=tuple(self.sources),
            skills=tuple(visible),
            shadowed=tuple(shadowed),
            skipped=tuple(skipped),
            diagnostics=tuple(diagnostics),
            counts=counts,
            files_found=len(results),
        )
