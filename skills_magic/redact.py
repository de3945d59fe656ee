"""Masking credentials in text before it is stored: script output, audit rows, `--record` cassettes.

Two kinds of secret are replaced by one marker (MASK), as GitHub Actions masks secrets in its logs:
- the values of the kernel's environment variables that are secrets, wherever they occur in the text: by name (KEY,
  TOKEN, PASSWORD, DSN, WEBHOOK, ...), or by value (the password of a `scheme://user:password@host` URL);
- credential shapes from anywhere: the password of a `scheme://user:password@host` URL (scheme, user and host stay
  readable), chat webhook URLs, private key blocks and well-known token formats (Anthropic, OpenAI, GitHub, Slack,
  AWS, Google, ...).

API: `mask(text)` for a string, `mask_data(value)` for JSON-like values (dicts, lists, strings), `is_secret_name` and
`looks_like_credential` for deciding about one variable; `Redactor` holds one environment's secrets (`redactor()`
keeps the kernel's, rebuilt when they change). Each kind of secret costs a C-speed `in` check, and a regex pass only
when it is present, so a 1 MB output takes milliseconds. Masking never raises: any str (lone surrogates, NUL) comes
back as a str, and anything that is not a str comes back as it was.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"  # the one marker that replaces a secret (GitHub Actions' choice, so readers know it)
MIN_SECRET_LENGTH = 6  # shorter values ("1", "true", "en") are not secrets, and masking them would shred ordinary text
# words that make a variable's value a secret: PASS covers PASSWORD, PASSWD and DB_PASS; PWD covers MYSQL_PWD;
# AUTH but not AUTHOR (GIT_AUTHOR_NAME is a name, not a credential)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|PWD|DSN|CREDENTIAL|AUTH(?!OR)|COOKIE|SESSION|WEBHOOK|PRIVATE",
                         re.IGNORECASE)
# names with a secret word that hold directories, sockets and desktop names (XDG_SESSION_TYPE=wayland,
# DESKTOP_SESSION=ubuntu, JPY_SESSION_NAME=the notebook's path): masking those would shred ordinary output
PUBLIC_NAMES = frozenset({"PWD", "OLDPWD", "DESKTOP_SESSION", "DBUS_SESSION_BUS_ADDRESS", "SESSION_MANAGER",
                          "SSH_AUTH_SOCK", "XAUTHORITY", "XDG_SESSION_TYPE", "XDG_SESSION_DESKTOP",
                          "XDG_SESSION_CLASS", "XDG_SESSION_ID", "XDG_SESSION_PATH", "JPY_SESSION_NAME"})
# Vendor prefixes (ANTHROPIC_, AWS_, GITHUB_) alone do not make a value secret here: the environment allowlist keeps
# them from scripts, every vendor credential has a secret word (ANTHROPIC_API_KEY, AWS_SECRET_ACCESS_KEY, GH_TOKEN),
# and masking AWS_PROFILE=default or GITHUB_WORKSPACE would mask "default" and the CI checkout path everywhere.

# Each credential shape: (substrings one of which it must contain, regex). A shape's regex runs only on text holding
# one of its substrings (a C-speed `in` check), and each regex starts with a literal, so a 1 MB output costs
# milliseconds. A group named `keep` stays readable; the rest of the match becomes MASK.
SHAPES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("://",), r"(?P<keep>://[^\s:/@?#]*:)[^\s@/]+(?=@)"),  # scheme://user:PASSWORD@host: scheme, user, host stay
    # webhook URLs are the credential: the service's prefix stays, the rest is masked
    (("hooks.slack.com",), r"(?P<keep>https://hooks\.slack\.com/(?:services|workflows|triggers)/)[\w/-]+"),
    (("/api/webhooks/",), r"(?P<keep>https://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/webhooks/)[\w/-]+"),
    (("webhook.office.com",), r"(?P<keep>https://[\w.-]+\.webhook\.office\.com/webhookb2/)[^\s\"'<>]+"),
    (("PRIVATE KEY-----",),  # a key block, up to its END line (or the end of a cut output)
     r"(?P<keep>-----BEGIN [A-Z ]*PRIVATE KEY-----)(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|[\s\S]*\Z)"),
    # well-known token formats, masked whole (not when glued to a longer word: see TOKEN_START)
    (("sk-",), r"sk-(?:ant-[\w-]{8,}|(?:proj-|svcacct-|admin-)?[\w-]{20,})"),  # Anthropic, OpenAI
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"gh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub classic tokens
    (("github_pat_",), r"github_pat_\w{20,}"),  # GitHub fine-grained tokens
    (("xox",), r"xox[abposr]-[\w-]{10,}"),  # Slack
    (("AKIA", "ASIA", "ABIA", "ACCA"), r"A(?:KIA|SIA|BIA|CCA)[0-9A-Z]{16}(?![0-9A-Z])"),  # AWS access key ids
    (("AIza",), r"AIza[\w-]{35}"),  # Google API keys
    (("glpat-",), r"glpat-[\w-]{20,}"),  # GitLab
    (("hf_",), r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    (("npm_",), r"npm_[A-Za-z0-9]{36}"),  # npm
    (("pypi-AgE",), r"pypi-AgE[\w-]{50,}"),  # PyPI
    (("k_live_",), r"[rs]k_live_[A-Za-z0-9]{16,}"),  # Stripe
    (("eyJ",), r"eyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]{10,}"),  # JSON Web Tokens
)
TOKEN_START = re.compile(r"[\w-]")  # a token right after one of these is part of a longer word ("task-...")
_SHAPES = tuple((hints, re.compile(source)) for hints, source in SHAPES)
_URL_PASSWORD = re.compile(r"://[^\s:/@?#]*:(?P<password>[^\s@/]+)@")


def is_secret_name(name: str) -> bool:
    """A variable whose name says it holds a credential (MYSQL_PWD yes, PWD no)."""
    return bool(SECRET_NAME.search(name)) and name.upper() not in PUBLIC_NAMES


def looks_like_credential(value: str) -> bool:
    """A value with a credential in it: a URL with a password, a webhook URL, a key block, a known token format."""
    return isinstance(value, str) and Redactor({}).mask(value) != value


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """value -> variable name, for the values to mask wherever they occur: secret-named variables' values, and the
    passwords of URLs in any variable; values shorter than MIN_SECRET_LENGTH are left alone."""
    environ = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name, value in environ.items():
        if not isinstance(value, str):
            continue
        if is_secret_name(name) and len(value) >= MIN_SECRET_LENGTH:
            found.setdefault(value, name)
        for match in _URL_PASSWORD.finditer(value):
            if len(match["password"]) >= MIN_SECRET_LENGTH:
                found.setdefault(match["password"], name)
    return found


class Redactor:
    """Masks one environment's secret values, then every credential shape."""

    def __init__(self, environ: Mapping[str, str] | None = None, label: str = MASK):
        """`label` replaces an environment value; it may name the variable, e.g. "[redacted:{name}]"."""
        self.names = secret_values(environ)
        self.label = label
        self.values = sorted(self.names, key=len, reverse=True)  # longest first: a value containing another wins

    def _environment(self, match: re.Match) -> str:
        return self.label.format(name=self.names.get(match[0], "?"))

    @staticmethod
    def _shape(match: re.Match) -> str:
        if match.re.groupindex.get("keep"):
            return match["keep"] + MASK
        start = match.start()
        if start and TOKEN_START.match(match.string, start - 1):  # "task-..." is a word, not an `sk-` token
            return match[0]
        return MASK

    def mask(self, text: Any) -> Any:
        """`text` with the secrets masked; anything that is not a str is returned as it was."""
        if not isinstance(text, str) or not text:
            return text
        present = [re.escape(value) for value in self.values if value in text]
        if present:  # re caches the compiled alternation, so the same secrets cost one compile per process
            text = re.sub("|".join(present), self._environment, text)
        for hints, pattern in _SHAPES:
            if any(hint in text for hint in hints):
                text = pattern.sub(self._shape, text)
        return text

    def mask_data(self, value: Any) -> Any:
        """Every string in a JSON-like value masked (dict values, list items); dict keys and other types kept."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, dict):
            return {k: self.mask_data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.mask_data(v) for v in value]
        if type(value) is tuple:
            return tuple(self.mask_data(v) for v in value)
        return value


_cached: dict[str, tuple[tuple[tuple[str, str], ...], Redactor]] = {}  # label -> (the secrets it was built for, it)


def redactor(environ: Mapping[str, str] | None = None, label: str = MASK) -> Redactor:
    """The Redactor for this environment (the kernel's by default), rebuilt only when its secrets change."""
    key = tuple(sorted(secret_values(environ).items()))
    cached = _cached.get(label)
    if cached is not None and cached[0] == key:
        return cached[1]
    built = Redactor(environ, label)
    _cached[label] = (key, built)
    return built


def mask(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every secret of `environ` (default: the kernel's environment) and every credential shape masked."""
    return redactor(environ).mask(text)


def mask_data(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    """`value` (a JSON-like structure) with every string in it masked as `mask` does."""
    return redactor(environ).mask_data(value)
