"""What to do when a sandboxed run fails: one line naming the cause and the grant or command that fixes it.

The line ends the cell's error and the tool result the model gets, so a model can ask the user for the right grant.
Causes are read from the end of the script's stderr (the messages Python, bash, Node and the C library print) and
from what the sandbox knows (the network was off, the working folder was read-only, a host was refused).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

STDERR_TAIL_CHARS = 6000  # the cause of a failure is printed last; older lines are context, not the reason

# a program a skill runs that this machine may lack -> what installs it (Debian package names)
INSTALL = {
    "soffice": "apt-get install libreoffice", "libreoffice": "apt-get install libreoffice",
    "node": "apt-get install nodejs npm", "npm": "apt-get install nodejs npm", "npx": "apt-get install nodejs npm",
    "pnpm": "npm install -g pnpm", "pandoc": "apt-get install pandoc", "xelatex": "apt-get install texlive-xetex",
    "pdflatex": "apt-get install texlive-latex-base", "pdftoppm": "apt-get install poppler-utils",
    "pdftotext": "apt-get install poppler-utils", "qpdf": "apt-get install qpdf", "convert": "apt-get install imagemagick",
    "magick": "apt-get install imagemagick", "ffmpeg": "apt-get install ffmpeg", "git": "apt-get install git",
    "chromium": "apt-get install chromium", "claude": "pip install 'skills-magic[claude-code]' (it bundles the CLI)",
    "Rscript": "apt-get install r-base-core", "java": "apt-get install default-jre",
}
# an import name -> the package that provides it, where they differ
PIP_NAMES = {
    "yaml": "pyyaml", "PIL": "pillow", "cv2": "opencv-python", "sklearn": "scikit-learn", "docx": "python-docx",
    "pptx": "python-pptx", "fitz": "pymupdf", "bs4": "beautifulsoup4", "dateutil": "python-dateutil",
    "Bio": "biopython", "skimage": "scikit-image", "PyPDF2": "pypdf2",
}

_READ_ONLY = re.compile(r"\[Errno 30\] Read-only file system: '([^']+)'|Read-only file system|EROFS[^\n]*?'([^']+)'")
_NETWORK = re.compile(
    r"Network is unreachable|Temporary failure in name resolution|Name or service not known|nodename nor servname"
    r"|getaddrinfo|ENOTFOUND|EAI_AGAIN|ENETUNREACH|Could not resolve host|Failed to establish a new connection"
    r"|No address associated with hostname|network is unreachable|\[Errno -[23]\]|\[Errno 101\]")
_MISSING_PROGRAM = (
    re.compile(r"(?:^|\n)(?:[^\n:]*: )?(?:line \d+: )?([\w.+-]+): (?:command )?not found"),
    re.compile(r"_execute_child[\s\S]*No such file or directory: '([\w.+/-]+)'"),  # subprocess could not start it
    re.compile(r"env: '?([\w.+-]+)'?: No such file or directory"),
    re.compile(r"spawn ([\w.+-]+) ENOENT"),
    re.compile(r"\b(" + "|".join(re.escape(p) for p in INSTALL) + r") (?:is )?not (?:installed|found)"),
)
_NAMED_HOST = re.compile(r"host='([\w.-]+)'|Failed to resolve '([\w.-]+)'|ENOTFOUND ([\w.-]+)"
                         r"|Could not resolve host: ([\w.-]+)|getaddrinfo failed for ([\w.-]+)")
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_USAGE = re.compile(r"error: (unrecognized arguments|the following arguments are required|argument [^\n]*)")


def allow_command(skill: str, subject: str, grant: str) -> str:
    from skills_magic.safety.policy import pre_approval_hint

    return f"{pre_approval_hint(skill, subject)} {grant}"


def refused_host_line(skill: str, subject: str, hosts: Sequence[str], host: str, port: int | None = None) -> str:
    """What the network proxy answers for a host this run was not granted: the host and the exact command."""
    from skills_magic.safety.netproxy import grant_for

    wanted = grant_for(host, port)
    return (f"skills_magic: host {wanted} is not granted to this run; allow it with "
            f"{allow_command(skill, subject, '--network ' + ','.join([*hosts, wanted]))}")


@dataclass(frozen=True)
class HostRefusal:
    """The network proxy's answer for one run (its `refusal`): `refused_host_line` for this skill, subject and the
    hosts the run was granted."""

    skill: str
    subject: str
    hosts: tuple[str, ...]

    def __call__(self, host: str, port: int | None = None) -> str:
        return refused_host_line(self.skill, self.subject, self.hosts, host, port)


def failure_hint(stderr: str, exit_code: int | None, timed_out: bool, *, skill: str, subject: str, network: bool,
                 hosts: Sequence[str] = (), refused_hosts: Sequence[str] = (), working_folder: str | None = None,
                 working_copy_on_write: bool = False, stdout: str = "") -> str | None:
    """One line: the likely cause of a failed run and what fixes it; None when nothing explains it. Read from the end
    of stderr; a missing program also from the end of stdout (some scripts print "pandoc is not installed" there)."""
    tail = (stderr or "")[-STDERR_TAIL_CHARS:]
    if refused_hosts:
        names = ",".join(refused_hosts)
        return (f"hint: the sandbox refused {names} (not granted to this run); to allow it: "
                f"{allow_command(skill, subject, '--network ' + ','.join(dict.fromkeys([*hosts, *refused_hosts])))}")
    match = _READ_ONLY.search(tail)
    if match:
        path = match.group(1) or match.group(2)
        return _read_only_hint(path, skill, subject, working_folder, working_copy_on_write)
    if _NETWORK.search(tail) and not network:
        named = _NAMED_HOST.search(tail)
        host = next((g for g in named.groups() if g), None) if named else None
        wanted = ",".join(dict.fromkeys([*hosts, host])) if host else "HOST[,HOST...]"
        return ("hint: the network is off in the sandbox; to let this run reach the hosts it needs: "
                f"{allow_command(skill, subject, '--network ' + wanted)}")
    if timed_out and not network:
        return ("hint: it timed out, and the network is off in the sandbox (a script waiting on a connection hangs "
                f"until the timeout); if it needs hosts: {allow_command(skill, subject, '--network HOST[,HOST...]')}; "
                f"if it needs longer: {allow_command(skill, subject, '--timeout 300')}")
    if timed_out:
        return f"hint: it timed out; to give it longer: {allow_command(skill, subject, '--timeout 300')}"
    module = _MISSING_MODULE.search(tail)
    if module:
        top = module.group(1).split(".")[0]
        package = PIP_NAMES.get(top, top)
        return (f"hint: the Python package {package!r} is not installed in the kernel's environment: %pip install "
                f"{package} (the script runs with the kernel's Python)")
    for pattern in _MISSING_PROGRAM:
        found = pattern.search(tail) or pattern.search((stdout or "")[-STDERR_TAIL_CHARS:])
        if found:
            program = os.path.basename(found.group(1))
            if program in ("python", "python3") or "/" in found.group(1) and os.path.exists(found.group(1)):
                continue
            install = INSTALL.get(program)
            how = f"install it ({install})" if install else "install it"
            return f"hint: the program {program!r} is not on this machine (or not on PATH); {how}"
    if exit_code == 2 and _USAGE.search(tail):
        return ("hint: the script rejected its arguments (its usage is printed above); every word after the skill's "
                "NAME is the script's")
    return None


def _read_only_hint(path: str | None, skill: str, subject: str, working_folder: str | None,
                    copy_on_write: bool) -> str:
    if path and working_folder:
        absolute = os.path.realpath(os.path.join(working_folder, path))
        inside = absolute == working_folder or absolute.startswith(working_folder.rstrip("/") + "/")
        if inside and not copy_on_write:
            from skills_magic.safety.sandbox import overlay_availability

            return (f"hint: the working folder is {overlay_availability()[1]}; to let it "
                    f"write there for real: {allow_command(skill, subject, '--write ' + os.path.dirname(absolute))}")
        if not inside:
            folder = os.path.dirname(absolute) or absolute
            return (f"hint: {absolute} is outside the working folder, and a run writes only there (copy-on-write) and "
                    f"in $SKILLS_MAGIC_OUTPUT; to let it write {folder}: "
                    f"{allow_command(skill, subject, '--write ' + folder)}")
        return ("hint: that path is read-only in the sandbox (the skill's own folder and the project's control files "
                "stay read-only); write in the working folder or in $SKILLS_MAGIC_OUTPUT")
    return ("hint: the sandbox is read-only outside the working folder and $SKILLS_MAGIC_OUTPUT; to let it write a "
            f"folder: {allow_command(skill, subject, '--write PATH')}")
