"""Network by host name, for real: a sandboxed script reaches exactly the granted hosts (HTTP and HTTPS-style CONNECT
through the proxy outside the sandbox, its only route), every other host is refused at once with a line naming the
host and the grant, a direct connection has no route, and the whole network stays a user-typed grant."""

from __future__ import annotations

import http.server
import socket
import textwrap
import threading
from pathlib import Path

import pytest
from fake_anthropic import QuietHandler

from skills_magic.safety import sandbox
from skills_magic.skills.catalog import Source
from skills_magic.safety.gate import unattended
from skills_magic.session import SkillsSession
from notebook_setup import registered_magics
from skillfiles import script_skill

AVAILABLE, WHY = sandbox.availability()
pytestmark = [pytest.mark.needs_sandbox,
              pytest.mark.skipif(not AVAILABLE, reason=f"no bubblewrap sandbox here: {WHY}")]

FETCH = """
    import socket, sys, urllib.request
    for url in sys.argv[1:]:
        if url.startswith("direct:"):  # no proxy: a plain socket to the address
            host, port = url[7:].rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
                print(url, "CONNECTED")
            except OSError as error:
                print(url, "ERR", error)
            continue
        try:
            print(url, "OK", urllib.request.urlopen(url, timeout=10).read().decode())
        except Exception as error:
            print(url, "ERR", error)
"""


class Page(QuietHandler):
    def do_GET(self):
        self.reply(b"the web api answered")


@pytest.fixture
def api():
    """A local HTTP server standing in for a web API."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def place(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def session_with(place: Path) -> SkillsSession:
    script_skill(place / "skills", "fetch.py", textwrap.dedent(FETCH))
    return SkillsSession(sources=[Source("session", str(place / "skills"), True)], cwd=str(place))


def fetch(session: SkillsSession, *urls: str):
    outcome = session.gate().run_script(session.skill("x"), "scripts/fetch.py", list(urls), "", unattended)
    assert outcome.run is not None, outcome.error
    return outcome.run, dict(line.split(" ", 1) for line in outcome.run.stdout.splitlines())


def test_a_granted_host_is_reached_and_every_other_host_is_refused_naming_the_grant(place, api):
    session = session_with(place)
    session.add_rule("allow", "x:scripts/*", network="127.0.0.1")
    run, lines = fetch(session, f"http://127.0.0.1:{api}/", "http://blocked.example.org/data",
                       "https://blocked.example.org/data")
    assert lines[f"http://127.0.0.1:{api}/"] == "OK the web api answered"
    grant = "%skills allow x:scripts/fetch.py --network 127.0.0.1,blocked.example.org"
    for url in ("http://blocked.example.org/data", "https://blocked.example.org/data"):
        assert "host blocked.example.org is not granted to this run" in lines[url] and grant in lines[url]
    assert run.refused_hosts == ("blocked.example.org",)
    assert run.hint == ("hint: the sandbox refused blocked.example.org (not granted to this run); to allow it: "
                        f"{grant}")


def test_the_proxy_is_the_only_route_out(place, api):
    session = session_with(place)
    session.add_rule("allow", "x:scripts/*", network="127.0.0.1")
    _run, lines = fetch(session, f"direct:127.0.0.1:{api}", "direct:192.0.2.1:80")
    assert all(value.startswith("ERR") for value in lines.values()), lines  # the host's loopback is not the run's


def test_without_a_grant_there_is_no_network_and_the_hint_says_how_to_grant_hosts(place, api):
    session = session_with(place)
    session.add_rule("allow", "x:scripts/*")
    session.skill("x")
    (Path(session.skill("x").folder) / "scripts" / "fail.py").write_text(
        "import urllib.request\nurllib.request.urlopen('http://pypi.org/simple/', timeout=5)\n", encoding="utf-8")
    outcome = session.gate().run_script(session.skill("x"), "scripts/fail.py", [], "", unattended)
    assert outcome.run.exit_code != 0
    assert outcome.run.hint == ("hint: the network is off in the sandbox; to let this run reach the hosts it needs: "
                                "%skills allow x:scripts/fail.py --network HOST[,HOST...]")


def test_wildcard_patterns_grant_subdomains_only(place):
    from skills_magic.safety.netproxy import HostPatterns

    patterns = HostPatterns.parse("*.crossref.org,doi.org")
    assert patterns.allows("api.crossref.org") and patterns.allows("a.b.crossref.org") and patterns.allows("doi.org")
    assert not patterns.allows("crossref.org") and not patterns.allows("evilcrossref.org")


def test_the_whole_network_stays_possible_when_typed(place, api):
    session = session_with(place)
    session.add_rule("allow", "x:scripts/*", network=True)
    _run, lines = fetch(session, f"direct:127.0.0.1:{api}")
    assert lines[f"direct:127.0.0.1:{api}"] == "CONNECTED"


def test_a_trusted_project_file_may_name_hosts_but_not_grant_the_whole_network(place, api):
    (place / "skills-policy.yaml").write_text(
        "allow:\n  - {rule: 'x:scripts/fetch.py', network: ['127.0.0.1']}\n  - {rule: 'x:scripts/other.py', network: true}\n")
    session = session_with(place)
    session.trust()
    assert any("`network: true` dropped" in p for p in session.policy.problems)
    _run, lines = fetch(session, f"http://127.0.0.1:{api}/")
    assert lines[f"http://127.0.0.1:{api}/"] == "OK the web api answered"


def test_policy_and_the_magic_show_the_hosts(place, ip):
    session_with(place)
    with registered_magics(ip):
        ip.run_line_magic("skills", f"add {place / 'skills'}")
        ip.run_line_magic("skills", "allow x:scripts/* --network pypi.org,*.crossref.org")
        text = ip.run_line_magic("skills", "policy").text()
    assert "allow x:scripts/* (network: pypi.org,*.crossref.org)  [%skills allow]" in text


def test_a_bad_host_pattern_is_a_one_line_error(place):
    from skills_magic.safety.policy import RuleError

    session = session_with(place)
    for bad in ("https://pypi.org/simple", "*pypi.org", "two words", "*.org"):
        with pytest.raises(RuleError):
            session.add_rule("allow", "x:scripts/*", network=bad)


def test_the_proxy_refuses_before_any_lookup(place, monkeypatch):
    """The refusal is immediate: a not-granted host is never resolved, so nothing about it leaves the machine."""
    looked_up = []
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: looked_up.append(host) or real(host, *a, **k))
    session = session_with(place)
    session.add_rule("allow", "x:scripts/*", network="127.0.0.1")
    _run, lines = fetch(session, "http://never-resolved.example.net/")
    assert "not granted" in lines["http://never-resolved.example.net/"]
    assert "never-resolved.example.net" not in looked_up


def test_a_write_grant_for_a_missing_folder_creates_it_and_a_missing_file_is_refused(place):
    from skills_magic.safety.policy import RuleError

    session = session_with(place)
    session.add_rule("allow", "x:scripts/*", writable=["out/figures"])
    assert (place / "out" / "figures").is_dir()
    with pytest.raises(RuleError, match="no such file; a grant binds an existing file or folder"):
        session.add_rule("allow", "x:scripts/*", writable=["missing/report.json"])


def test_a_scripts_own_server_on_the_sandbox_loopback_stays_direct_under_a_host_grant(place):
    """A grant for some host must not send `http://localhost` (the run's own test server) through the proxy."""
    session = session_with(place)
    (Path(session.skill("x").folder) / "scripts" / "own.py").write_text(textwrap.dedent("""
        import http.server, threading, urllib.request
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 8765), http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        for url in ("http://localhost:8765/", "http://127.0.0.1:8765/"):
            print(urllib.request.urlopen(url, timeout=10).status)
        server.shutdown()
    """), encoding="utf-8")
    session.add_rule("allow", "x:scripts/*", network="pypi.org")
    outcome = session.gate().run_script(session.skill("x"), "scripts/own.py", [], "", unattended)
    assert outcome.run.stdout.split() == ["200", "200"], outcome.run.stderr
