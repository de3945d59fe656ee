"""Trust for what a project ships, as direnv does it: a project's `skills-policy.yaml` arrives with a cloned
repository, so its allow rules are inert until the user trusts its exact bytes (`%skills trust`). The trust store
records each trusted file's sha256 by its absolute real path, in the user's config folder, outside every project;
any change to the file (one byte) makes its allow rules inert again until it is trusted anew.

Nothing here knows what a rule is: the policy reads the file, this module says whether its bytes are trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Literal

from skills_magic.clock import utc_now
from skills_magic.errors import PathError, SkillsMagicError
from skills_magic.paths import APP_NAME, CONFIG_DIR_ENV, config_dir  # noqa: F401  (re-exported: their home before)

TRUST_FILE = "trusted-policies.json"  # in the config folder: {"trusted": {real path: {"sha256", "trusted_at"}}}
USER_POLICY_FILE = "skills-policy.yaml"  # the user's own policy file in the config folder: full powers, never inert
STORE_VERSION = 1  # the store's format, written into it so a later format can tell old stores apart
DIGEST_SHOWN = 12  # hex digits of a sha256 shown in messages: enough to tell two versions apart at a glance

TrustStatus = Literal["trusted", "untrusted", "changed"]


class TrustError(SkillsMagicError):
    """Something about trusting a project's policy file went wrong."""


class TrustStoreUnreadable(TrustError, PathError, ValueError):
    """The trust store exists but cannot be read; nothing it holds is trusted until it is fixed or removed."""

    MESSAGE = "the trust store {path} cannot be read ({why}); nothing is trusted until you fix or remove it"

    def __init__(self, path: str, why: str):
        super().__init__(path, why=why)


class NothingToTrust(TrustError, PathError, FileNotFoundError):
    """`%skills trust` where there is no policy file."""

    MESSAGE = "there is no {name} at {path}: nothing to trust"


def user_policy_path() -> str:
    """The user's own policy file: loaded as the user's, with full powers (secrets, unsandboxed, any path)."""
    return os.path.join(config_dir(), USER_POLICY_FILE)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def short(digest: str | None) -> str:
    return f"{digest[:DIGEST_SHOWN]}…" if digest else "-"


@dataclass(frozen=True)
class TrustState:
    """Whether one file's current bytes are the trusted ones."""

    path: str  # the absolute real path the store is keyed by
    status: TrustStatus
    sha256: str  # of the bytes on disk now
    trusted_sha256: str | None = None  # what the store recorded (None: never trusted)
    trusted_at: str | None = None


@dataclass(frozen=True)
class TrustReport:
    """What `%skills trust` did: the digest recorded (or revoked), and every rule and problem of exactly those bytes."""

    path: str  # absolute
    sha256: str | None  # the digest recorded now (with `revoked`: the one forgotten, None if there was none)
    previous: str | None  # the digest trusted before (None: never trusted)
    revoked: bool = False
    rules: tuple = ()  # policy.Rule, every rule the trusted bytes hold (deny and allow) with the grants kept
    problems: tuple[str, ...] = ()  # entries refused and grants dropped, each with its reason
    now: Any = None  # policy.PolicyFile as the policy reads the file after recording (None: not one it reads)
    store: str = ""  # the trust store's path


class TrustStore:
    """Trusted policy files by absolute real path: `{"version": 1, "trusted": {path: {"sha256", "trusted_at"}}}`.
    Every write replaces the whole file atomically (a temporary file, then os.replace)."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)

    @classmethod
    def default(cls) -> TrustStore:
        """The store in the user's config folder ($SKILLS_MAGIC_CONFIG_DIR, looked up now)."""
        return cls(os.path.join(config_dir(), TRUST_FILE))

    def records(self) -> dict[str, dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise TrustStoreUnreadable(self.path, str(error)) from None
        trusted = data.get("trusted") if isinstance(data, dict) else None
        if not isinstance(trusted, dict) or not all(isinstance(r, dict) for r in trusted.values()):
            raise TrustStoreUnreadable(self.path, "expected {\"trusted\": {path: {\"sha256\": ...}}}")
        return trusted

    def signature(self) -> tuple[int, int, int] | None:
        """Changes whenever the store is rewritten (os.replace gives the file a new inode): the policy re-reads then."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def state(self, path: str, sha256: str) -> TrustState:
        """Whether `sha256` (of the bytes just read from `path`) is what the user trusted for that file."""
        real = os.path.realpath(path)
        record = self.records().get(real) or {}
        recorded = record.get("sha256") if isinstance(record.get("sha256"), str) else None
        status: TrustStatus = "untrusted" if recorded is None else ("trusted" if recorded == sha256 else "changed")
        return TrustState(real, status, sha256, recorded, record.get("trusted_at"))

    def trust(self, path: str, sha256: str) -> str | None:
        """Record `sha256` as the trusted bytes of `path`; returns the digest it replaces (None: first trust)."""
        real = os.path.realpath(path)
        with self._locked():
            records = self.records()
            previous = (records.get(real) or {}).get("sha256")
            records[real] = {"sha256": sha256, "trusted_at": utc_now(whole_seconds=True)}
            self._write(records)
        return previous

    def revoke(self, path: str) -> str | None:
        """Forget `path`: its rules are inert again. Returns the digest that was trusted (None: it was not)."""
        real = os.path.realpath(path)
        with self._locked():
            records = self.records()
            removed = records.pop(real, None)
            if removed is not None:
                self._write(records)
        return (removed or {}).get("sha256")

    def _write(self, records: dict[str, dict[str, Any]]) -> None:
        text = json.dumps({"version": STORE_VERSION, "trusted": dict(sorted(records.items()))}, indent=1) + "\n"
        write_atomically(self.path, text)

    def _locked(self):
        """An exclusive lock beside the store, so two kernels trusting at once do not lose each other's record."""
        return _FileLock(self.path + ".lock")


class _FileLock:
    def __init__(self, path: str):
        self.path = path
        self.handle = None

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        self.handle = open(self.path, "a")
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks here; the atomic replace still never leaves half a file
            return self
        fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.handle.close()  # closing releases the lock


def write_atomically(path: str, text: str) -> None:
    """Replace `path` with `text` all at once (a temporary file beside it, then os.replace): a reader sees the old
    bytes or the new ones, never half; a failed write leaves the old file as it was."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
