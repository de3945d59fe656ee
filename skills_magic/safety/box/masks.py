"""The mask list: what a sandboxed run never sees, whatever a rule grants (credentials, tokens, shell and REPL
histories, kernel connection files, `.env` files). The sandbox applies it after every writable bind: a masked folder
becomes an empty read-only folder, a masked file reads as empty."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

# One entry a line, with why. Paths starting with ~ are in the user's home; $NAME is the path a variable names.
MASKS: tuple[tuple[str, str], ...] = (
    ("~/.ssh", "SSH keys and known hosts"),
    ("~/.gnupg", "GPG private keys"),
    ("~/.aws", "AWS credentials"),
    ("~/.azure", "Azure credentials"),
    ("~/.config", "most tools' tokens (gh, gcloud, ...); our own trust store and user policy live here too"),
    ("~/.docker", "registry credentials"),
    ("~/.kube", "cluster credentials"),
    ("~/.netrc", "passwords for hosts (curl, git, pip)"),
    ("~/.git-credentials", "git's stored passwords"),
    ("~/.pypirc", "PyPI upload tokens"),
    ("~/.npmrc", "npm tokens"),
    ("~/.yarnrc", "yarn tokens"),
    ("~/.pgpass", "PostgreSQL passwords"),
    ("~/.my.cnf", "MySQL passwords"),
    ("~/.password-store", "pass's password store"),
    ("~/.local/share/keyrings", "the desktop keyring"),
    ("~/.cache/huggingface", "the Hugging Face token"),
    ("~/.huggingface", "the Hugging Face token (old place)"),
    ("~/.kaggle", "the Kaggle API key"),
    ("~/.cargo/credentials", "crates.io token"),
    ("~/.cargo/credentials.toml", "crates.io token"),
    ("~/.terraform.d", "Terraform Cloud tokens"),
    ("~/.databrickscfg", "Databricks tokens"),
    ("~/.claude", "Claude Code's credentials and transcripts"),
    ("~/.claude.json", "Claude Code's account state"),
    ("~/.anthropic", "Anthropic credentials"),
    ("~/.jupyter", "Jupyter server configuration (passwords, tokens)"),
    ("~/.local/share/jupyter/runtime", "kernel connection files (their HMAC key drives the kernel) and server tokens"),
    ("~/.ipython", "IPython's history of every cell typed (keys pasted into a cell stay there)"),
    ("~/.bash_history", "shell history"),
    ("~/.zsh_history", "shell history"),
    ("~/.sh_history", "shell history"),
    ("~/.history", "shell history"),
    ("~/.local/share/fish", "shell history"),
    ("~/.python_history", "Python REPL history"),
    ("~/.node_repl_history", "Node REPL history"),
    ("~/.psql_history", "psql history"),
    ("~/.mysql_history", "MySQL history"),
    ("~/.sqlite_history", "SQLite shell history"),
    ("~/.lesshst", "less's search history"),
    ("~/.viminfo", "vim's registers and history"),
    ("$JUPYTER_RUNTIME_DIR", "kernel connection files where Jupyter was told to keep them"),
    ("$XDG_RUNTIME_DIR", "the session's sockets and runtime secrets (dbus, keyring, ssh-agent)"),
    ("$SSH_AUTH_SOCK", "the SSH agent"),
    ("$SKILLS_MAGIC_CONFIG_DIR", "our trust store and the user's own policy file, where they were moved"),
)
ENV_FILE = re.compile(r"^\.env(rc)?($|\.)")  # .env, .env.local, .envrc ...: in every folder from the session up


def home_masks(home: str, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(absolute path, reason) for every entry of MASKS that exists here (both the path and, if it is a link, its
    target); environment-named entries only when the variable is set."""
    found: list[tuple[str, str]] = []
    for entry, reason in MASKS:
        if entry.startswith("$"):
            path = environ.get(entry[1:], "")
            if not path or not os.path.isabs(path):
                continue
        else:
            path = os.path.join(home, entry[2:])
        for candidate in dict.fromkeys((path, os.path.realpath(path))):
            if os.path.lexists(candidate) and candidate not in ("/", home):
                found.append((candidate, reason))
    runtime = os.path.join(environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "jupyter", "runtime")
    if os.path.isdir(runtime):
        found.append((runtime, "kernel connection files and server tokens"))
    return found


def env_files(folders: Sequence[str]) -> list[str]:
    """Every `.env*` and `.envrc` in each folder and its parents up to the repository root (the first folder with a
    `.git`), or the folder alone when it is in no repository."""
    found: list[str] = []
    for start in folders:
        chain, here = [], os.path.realpath(start)
        while True:
            chain.append(here)
            if os.path.exists(os.path.join(here, ".git")):
                break
            parent = os.path.dirname(here)
            if parent == here:
                chain = chain[:1]  # no repository: only the folder itself
                break
            here = parent
        for place in chain:
            try:
                names = os.listdir(place)
            except OSError:
                continue
            found += [os.path.join(place, n) for n in sorted(names) if ENV_FILE.match(n)]
    return list(dict.fromkeys(found))


def mask_arguments(home: str, environ: Mapping[str, str], folders: Sequence[str]) -> list[str]:
    """bwrap's arguments hiding every mask and every `.env` file of `folders`: a folder becomes an empty read-only
    tmpfs, a file is /dev/null."""
    hidden = [path for path, _reason in home_masks(home, environ)]
    hidden += env_files(folders)
    args: list[str] = []
    for path in dict.fromkeys(hidden):
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args
