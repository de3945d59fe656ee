"""Network by host name: host patterns, the HTTP proxy on a unix socket and the forwarder relaying to it, with real
sockets and real processes; last, the whole chain inside a fresh network namespace, where the proxy is the only way
out. A local http.server stands in for a web API."""

from __future__ import annotations

import errno
import http.client
import http.server
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from fake_anthropic import QuietHandler
from processes import processes_running, wait_until_gone

from skills_magic.safety import netproxy
from skills_magic.safety.netproxy import (
    REFUSED_PATTERNS,
    HostPattern,
    HostPatterns,
    InvalidHostPattern,
    NetworkProxy,
    NetworkProxyError,
    forwarder_command,
    forwarder_shell,
    grant_for,
    host_allowed,
    parse_pattern,
    proxy_environment,
    refusal_line,
)

BLOCKED = "blocked.example.org"


def wait_for(condition, seconds: float = 10.0) -> bool:
    """Poll `condition` until it holds or the deadline passes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        threading.Event().wait(0.01)
    return condition()


@pytest.fixture(autouse=True)
def no_thread_raises(monkeypatch):
    """Nothing a client sends may raise in a proxy thread (in a notebook, the kernel's own process)."""
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    yield
    assert not raised, [f"{r.thread.name}: {r.exc_type.__name__}: {r.exc_value}" for r in raised]


# --- stand-ins and helpers --------------------------------------------------------------------------------------------
class WebAPI(QuietHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/":
            self.reply(b"hello from the web API")
        else:
            self.reply(json.dumps({"path": self.path, "headers": dict(self.headers)}).encode())

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(json.dumps({"path": self.path, "headers": dict(self.headers), "body": body.decode()}).encode())


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # the concurrency test connects 25 at once
    daemon_threads = True


@pytest.fixture
def web():
    server = Server(("127.0.0.1", 0), WebAPI)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def echo():
    """A TCP server echoing every byte until the client's end-of-file, then closing."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(None)

    def serve(conn):
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


@pytest.fixture
def folder():
    """A short private folder for unix sockets (tmp_path can be longer than a socket path may be)."""
    path = tempfile.mkdtemp(prefix="np-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_proxy(folder):
    proxies = []

    def make(patterns, **options) -> NetworkProxy:
        proxy = NetworkProxy(patterns, os.path.join(folder, f"proxy{len(proxies)}.sock"), **options).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def make_forwarder():
    """Start forwarders as real processes, each watching a process of the test's; when that ends, so must they."""
    started = []

    def make(socket_path: str) -> int:
        watched = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        result = subprocess.run(forwarder_command(0, socket_path, watched.pid), capture_output=True, text=True,
                                timeout=30)
        assert result.returncode == 0, result.stderr
        started.append((watched, socket_path))
        return int(result.stdout)

    yield make
    for watched, socket_path in started:
        pids = processes_running(socket_path)
        watched.stdin.close()
        watched.wait(timeout=30)
        assert all(wait_until_gone(pid) for pid in pids), "a forwarder outlived the process it watched"


@pytest.fixture
def chain(web, make_proxy, make_forwarder):
    """The proxy granting 127.0.0.1, its forwarder's TCP port, and the web API's port."""
    proxy = make_proxy("127.0.0.1")
    return proxy, make_forwarder(proxy.socket_path), web


def opener(port: int) -> urllib.request.OpenerDirector:
    url = f"http://127.0.0.1:{port}"
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": url, "https": url}))


def exchange(where: str | int, data: bytes, end: bool = False) -> bytes:
    """Send `data` to the proxy (a unix socket path) or the forwarder (a port); everything until it closes."""
    if isinstance(where, str):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(where)
    else:
        conn = socket.create_connection(("127.0.0.1", where))
    conn.settimeout(10)
    received = bytearray()
    with conn:
        try:
            conn.sendall(data)
            if end:
                conn.shutdown(socket.SHUT_WR)
        except (ConnectionResetError, BrokenPipeError):
            pass  # it answered and closed before taking all of it: the answer is still there to read
        try:
            while chunk := conn.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    return bytes(received)


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.") else 0


def body(response: bytes) -> str:
    return response.partition(b"\r\n\r\n")[2].decode()


@pytest.fixture
def lookups(monkeypatch):
    """Every host name resolved in this process (the proxy resolves on the host side)."""
    seen = []
    real = socket.getaddrinfo

    def recording(host, *args, **kwargs):
        seen.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    return seen


# --- host patterns ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("grant, host, port, allowed", [
    ("pypi.org", "pypi.org", 443, True),
    ("pypi.org", "PyPI.ORG", 443, True),
    ("PyPI.org.", "pypi.org", 443, True),
    ("pypi.org", "pypi.org.", 80, True),
    ("pypi.org", "files.pypi.org", 443, False),
    ("pypi.org", "pypi.org.evil.com", 443, False),
    ("bücher.example", "xn--bcher-kva.example", 443, True),
    ("xn--bcher-kva.example", "BÜCHER.example", 443, True),
    ("bücher\u3002example", "bücher.example", 443, True),
    ("*.example.org", "a.example.org", 443, True),
    ("*.example.org", "a.b.example.org", 443, True),
    ("*.example.org", "example.org", 443, False),
    ("*.example.org", "badexample.org", 443, False),
    ("*.example.org", "a.example.org.evil.com", 443, False),
    ("*.example.org,example.org", "example.org", 443, True),
    ("pypi.org:443", "pypi.org", 443, True),
    ("pypi.org:443", "pypi.org", 80, False),
    ("*.example.org:8443", "a.example.org", 8443, True),
    ("*.example.org:8443", "a.example.org", 443, False),
    ("127.0.0.1", "127.0.0.1", 8080, True),
    ("127.0.0.1", "127.0.0.2", 8080, False),
    ("127.0.0.1", "localhost", 8080, False),
    ("127.0.0.1:8080", "127.0.0.1", 8080, True),
    ("127.0.0.1:8080", "127.0.0.1", 8081, False),
    ("::1", "[::1]", 443, True),
    ("[::1]:443", "::1", 443, True),
    ("[::1]:443", "::1", 80, False),
    ("0:0:0:0:0:0:0:1", "::1", 443, True),
    ("pypi.org", "not a host", 443, False),
])
def test_a_pattern_grants_exactly_its_hosts_and_ports(grant, host, port, allowed):
    assert host_allowed(host, grant, port) is allowed
    assert HostPatterns.parse(grant).allows(host, port) is allowed


def test_a_port_less_question_is_granted_only_by_a_port_less_pattern():
    assert host_allowed("pypi.org", "pypi.org")
    assert not host_allowed("pypi.org", "pypi.org:443")


@pytest.mark.parametrize("pattern, why", REFUSED_PATTERNS, ids=[p or "empty" for p, _ in REFUSED_PATTERNS])
def test_every_refused_pattern_form_raises_a_value_error_naming_the_pattern(pattern, why):
    with pytest.raises(InvalidHostPattern) as raised:
        parse_pattern(pattern)

    assert isinstance(raised.value, ValueError)
    assert str(raised.value).startswith(f"invalid network host pattern {pattern!r}: ")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("grant, says", [
    ("pypi.org,,files.pythonhosted.org", "empty"),
    ("pypi.org,", "empty"),
    ("*", "every host"),
    ("*foo.org", "first label"),
    ("https://pypi.org/simple", "give the host alone: pypi.org"),
    ("pypi.org/simple", "give the host alone: pypi.org"),
    ("pypi org", "whitespace"),
    ("*.org", "top-level domain"),
    ("pypi.org:99999", "1 to 65535"),
])
def test_an_invalid_grant_says_what_is_wrong(grant, says):
    with pytest.raises(ValueError, match=says):
        HostPatterns.parse(grant)


def test_patterns_are_kept_canonical_and_print_as_a_grant():
    patterns = HostPatterns.parse(["PyPI.org., *.Crossref.org", "bücher.example,[::1]:443", "pypi.org"])

    assert str(patterns) == "pypi.org,*.crossref.org,xn--bcher-kva.example,[::1]:443"
    assert patterns == HostPatterns.parse(str(patterns))
    assert parse_pattern("*.crossref.org") == HostPattern("crossref.org", wildcard=True)
    assert parse_pattern("10.0.0.1:80") == HostPattern("10.0.0.1", port=80, is_address=True)


def test_the_refusal_line_names_the_host_and_the_grant_that_allows_it():
    assert refusal_line(BLOCKED) == (f"skills_magic: host {BLOCKED} is not granted to this run; "
                                     f"allow it with --network {BLOCKED}")
    assert refusal_line("::1", 8080).endswith("host ::1 port 8080 is not granted to this run; "
                                              "allow it with --network [::1]:8080")
    assert grant_for("pypi.org", 443) == "pypi.org:443"
    assert HostPatterns.parse(grant_for("::1", 8080)).allows("::1", 8080)


def test_the_environment_sends_every_client_to_the_forwarder_and_none_around_it():
    env = proxy_environment(3128)

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        assert env[name] == env[name.lower()] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""


# --- the proxy, through the forwarder ---------------------------------------------------------------------------------
def test_the_forwarder_prints_its_port_and_returns_only_once_listening(make_proxy, make_forwarder):
    proxy = make_proxy("127.0.0.1")
    port = make_forwarder(proxy.socket_path)  # subprocess.run returned: the daemon holds none of its pipes

    socket.create_connection(("127.0.0.1", port), timeout=5).close()  # listening already, no retry needed


def test_a_granted_host_is_reached_through_the_forwarder_and_the_proxy(chain):
    proxy, port, web = chain

    with opener(port).open(f"http://127.0.0.1:{web}/", timeout=10) as response:
        assert response.read() == b"hello from the web API"
    assert proxy.reached == ["127.0.0.1"]
    assert proxy.refused == []


def test_plain_http_to_a_host_not_granted_is_refused_at_once_without_a_lookup(chain, lookups):
    proxy, port, _ = chain

    with pytest.raises(urllib.error.HTTPError) as refused:
        opener(port).open(f"http://{BLOCKED}/data?q=1", timeout=10)

    assert refused.value.code == 403
    assert refused.value.headers["X-Skills-Magic"] == "refused"
    assert refused.value.read().decode().strip() == refusal_line(BLOCKED)
    assert BLOCKED not in lookups
    assert proxy.refused == [BLOCKED] and proxy.reached == []
    assert proxy.suggested_grant() == BLOCKED


def test_connect_to_a_host_not_granted_is_refused_and_the_client_shows_the_line(chain, lookups):
    proxy, port, _ = chain
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.set_tunnel(BLOCKED, 443)

    with pytest.raises(OSError) as refused:  # what pip and requests users see, inside their ProxyError
        connection.request("GET", "/")

    assert str(refused.value) == f"Tunnel connection failed: 403 {refusal_line(BLOCKED)}"
    raw = exchange(port, f"CONNECT {BLOCKED}:443 HTTP/1.1\r\nHost: {BLOCKED}:443\r\n\r\n".encode())
    assert status(raw) == 403 and body(raw).strip() == refusal_line(BLOCKED)
    assert BLOCKED not in lookups
    assert proxy.refused == [BLOCKED]


def test_connect_tunnels_http_end_to_end(chain):
    proxy, port, web = chain
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.set_tunnel("127.0.0.1", web)

    connection.request("GET", "/")
    response = connection.getresponse()
    assert (response.status, response.read()) == (200, b"hello from the web API")
    connection.request("GET", "/")  # the tunnel stays open for the next request on it
    assert connection.getresponse().read() == b"hello from the web API"
    connection.close()
    assert proxy.reached == ["127.0.0.1"]


def test_a_tunnel_carries_a_large_stream_and_passes_the_end_of_file_on(web, echo, make_proxy, make_forwarder):
    proxy = make_proxy("127.0.0.1")
    port = make_forwarder(proxy.socket_path)
    payload = os.urandom(1_000_000)

    answer = exchange(port, f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode() + payload, end=True)

    head, _, echoed = answer.partition(b"\r\n\r\n")
    assert head == b"HTTP/1.1 200 Connection established"
    assert echoed == payload  # the echo server saw our end-of-file through both relays, then closed


def test_plain_http_reaches_the_origin_in_origin_form_with_connection_close(chain):
    _, port, web = chain
    request = urllib.request.Request(f"http://127.0.0.1:{web}/echo?x=1", data=b"a body", method="POST",
                                     headers={"Proxy-Authorization": "Basic c2VjcmV0", "X-Kept": "yes",
                                              "Host": "wrong.example"})

    with opener(port).open(request, timeout=10) as response:
        seen = json.loads(response.read())

    assert seen["path"] == "/echo?x=1"
    assert seen["body"] == "a body"
    assert seen["headers"]["Connection"] == "close"
    assert seen["headers"]["Host"] == f"127.0.0.1:{web}"
    assert seen["headers"]["X-Kept"] == "yes"
    assert "Proxy-Authorization" not in seen["headers"]


# --- the proxy's answers, on its unix socket --------------------------------------------------------------------------
def test_a_host_granted_on_another_port_is_refused_naming_the_port(web, make_proxy):
    proxy = make_proxy("127.0.0.1:1")

    raw = exchange(proxy.socket_path, f"GET http://127.0.0.1:{web}/ HTTP/1.1\r\n\r\n".encode())

    assert status(raw) == 403
    assert body(raw).strip() == refusal_line("127.0.0.1", web)
    assert proxy.refused == [f"127.0.0.1:{web}"]


def test_a_granted_host_refusing_connections_gets_502_with_the_reason(make_proxy):
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    proxy = make_proxy("127.0.0.1")

    raw = exchange(proxy.socket_path, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())

    assert status(raw) == 502
    assert body(raw).strip() == f"skills_magic: cannot reach 127.0.0.1:{port}: connection refused"
    assert proxy.unreachable == {"127.0.0.1": "connection refused"} and proxy.reached == []


def test_a_granted_name_that_does_not_resolve_gets_502_saying_so(make_proxy, monkeypatch):
    def no_such_host(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    proxy = make_proxy("nowhere.example.org")

    raw = exchange(proxy.socket_path, b"GET http://nowhere.example.org/ HTTP/1.1\r\n\r\n")

    assert status(raw) == 502
    assert body(raw).strip() == ("skills_magic: cannot reach nowhere.example.org:80: no such host "
                                 "(Name or service not known)")


@pytest.mark.parametrize("address, kind", [("127.0.0.1", "loopback"), ("169.254.169.254", "link-local"),
                                           ("::ffff:127.0.0.1", "loopback")])
def test_a_granted_name_may_not_lead_to_this_machine_or_the_cloud_metadata(make_proxy, monkeypatch, address, kind):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: [
        (family, socket.SOCK_STREAM, 6, "", (address, port))])
    proxy = make_proxy("api.example.org")

    raw = exchange(proxy.socket_path, b"CONNECT api.example.org:443 HTTP/1.1\r\n\r\n")

    assert status(raw) == 403
    assert f"resolves to {address}, a {kind} address" in body(raw)
    assert proxy.reached == []


@pytest.mark.parametrize("garbage", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),  # a TLS ClientHello sent to the proxy itself
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # a request line without a host
    b"HELLO\r\n\r\n",
    b"GET http://127.0.0.1/ HTTP/9.9\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",  # no port
    b"CONNECT :443 HTTP/1.1\r\n\r\n",
    b"CONNECT a..b:443 HTTP/1.1\r\n\r\n",
    b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n",
    b"GET ftp://127.0.0.1/ HTTP/1.1\r\n\r\n",
    b"GET http://127.0.0.1:99999/ HTTP/1.1\r\n\r\n",
    b"GET http:/// HTTP/1.1\r\n\r\n",
    b"GET http://127.0.0.1/ HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET http://127.0.0.1/ HTTP/1.1\r\nX: a\x01b\r\n\r\n",
    b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Endless: " + b"a" * (16 * netproxy.MAX_HEADER_BYTES),
], ids=["tls-hello", "no-host", "no-target", "http-9", "http2-preface", "connect-no-port", "connect-no-host",
        "connect-bad-host", "https-absolute", "ftp", "bad-port", "empty-host", "header-no-colon", "header-control",
        "endless-header"])
def test_bad_client_input_gets_400_and_the_proxy_serves_the_next_request(web, make_proxy, garbage):
    proxy = make_proxy("127.0.0.1")

    raw = exchange(proxy.socket_path, garbage)

    assert status(raw) == 400
    assert body(raw).startswith("skills_magic: the network proxy cannot read this request: ")
    assert "\n" not in body(raw).strip()
    good = exchange(proxy.socket_path, f"GET http://127.0.0.1:{web}/ HTTP/1.1\r\n\r\n".encode())
    assert status(good) == 200 and body(good) == "hello from the web API"


def test_a_fault_of_the_proxy_on_one_request_answers_500_and_the_next_is_served(web, make_proxy, monkeypatch):
    proxy = make_proxy("127.0.0.1")
    real = NetworkProxy._connect

    def broken_once(self, host, port):
        monkeypatch.setattr(NetworkProxy, "_connect", real)
        raise KeyError("a bug")

    monkeypatch.setattr(NetworkProxy, "_connect", broken_once)
    request = f"GET http://127.0.0.1:{web}/ HTTP/1.1\r\n\r\n".encode()

    broken = exchange(proxy.socket_path, request)

    assert status(broken) == 500
    assert body(broken).strip() == "skills_magic: the network proxy failed on this request (KeyError)"
    assert status(exchange(proxy.socket_path, request)) == 200


def test_a_client_that_stalls_mid_request_is_answered_at_the_header_deadline(make_proxy):
    proxy = make_proxy("127.0.0.1", header_timeout=0.5)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(proxy.socket_path)
    conn.settimeout(10)
    conn.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")

    raw = conn.recv(65536)
    conn.close()

    assert status(raw) == 400 and "not complete within 0.5 seconds" in body(raw)


def test_a_client_that_connects_and_leaves_costs_nothing(web, make_proxy):
    proxy = make_proxy("127.0.0.1")
    for _ in range(5):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(proxy.socket_path)
        conn.close()

    assert wait_for(lambda: proxy.open_connections == 0)
    assert status(exchange(proxy.socket_path, f"GET http://127.0.0.1:{web}/ HTTP/1.1\r\n\r\n".encode())) == 200


def test_fifty_concurrent_clients_are_each_served_or_refused(chain):
    proxy, port, web = chain

    def fetch(i: int) -> int:
        url = f"http://127.0.0.1:{web}/" if i % 2 == 0 else f"http://host{i}.{BLOCKED}/"
        try:
            with opener(port).open(url, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    with ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(fetch, range(50)))

    assert codes == [200 if i % 2 == 0 else 403 for i in range(50)]
    assert len(proxy.refused) == 25 and proxy.reached == ["127.0.0.1"]
    assert wait_for(lambda: proxy.open_connections == 0)


def test_past_its_connection_limit_the_proxy_answers_503_and_serves_again_when_one_ends(echo, make_proxy):
    proxy = make_proxy("127.0.0.1", max_connections=2)
    tunnels = []
    for _ in range(2):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(proxy.socket_path)
        conn.settimeout(10)
        conn.sendall(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode())
        assert conn.recv(100).startswith(b"HTTP/1.1 200")
        tunnels.append(conn)

    busy = exchange(proxy.socket_path, f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode())
    assert status(busy) == 503 and "over 2 connections at once" in body(busy)

    tunnels.pop().close()
    assert wait_for(lambda: proxy.open_connections < 2)
    served = exchange(proxy.socket_path, f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\nping".encode(), end=True)
    assert served == b"HTTP/1.1 200 Connection established\r\n\r\nping"
    tunnels.pop().close()


def test_a_tunnel_silent_past_the_idle_timeout_is_closed(echo, make_proxy):
    proxy = make_proxy("127.0.0.1", idle_timeout=0.3)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(proxy.socket_path)
    conn.settimeout(10)
    conn.sendall(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\nping".encode())
    received = b""
    while chunk := conn.recv(100):  # the answer, the echo, then end-of-file once it idled
        received += chunk
    conn.close()

    assert received == b"HTTP/1.1 200 Connection established\r\n\r\nping"
    assert wait_for(lambda: proxy.open_connections == 0)


def test_the_socket_is_private_and_close_ends_tunnels_and_removes_it(echo, folder):
    path = os.path.join(folder, "p.sock")
    with NetworkProxy("127.0.0.1", path) as proxy:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        conn.settimeout(10)
        conn.sendall(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode())
        assert conn.recv(100).startswith(b"HTTP/1.1 200")

    assert conn.recv(100) == b""  # the open tunnel was ended
    conn.close()
    assert not os.path.exists(path)
    assert proxy.open_connections == 0


def test_the_proxy_refuses_a_socket_path_it_cannot_use(folder):
    taken = os.path.join(folder, "taken")
    open(taken, "w").close()

    with pytest.raises(NetworkProxyError, match="cannot listen on .*taken"):
        NetworkProxy("pypi.org", taken).start()
    with pytest.raises(NetworkProxyError, match="use a shorter folder"):
        NetworkProxy("pypi.org", os.path.join(folder, "x" * 120)).start()


# --- the forwarder's life -------------------------------------------------------------------------------------------
def start_forwarder(socket_path: str, watch_pid: int) -> tuple[int, int]:
    result = subprocess.run(forwarder_command(0, socket_path, watch_pid), capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    [pid] = processes_running(socket_path)
    return int(result.stdout), pid


def test_the_forwarder_exits_when_the_process_it_watches_ends(folder):
    watched = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    _, pid = start_forwarder(os.path.join(folder, "absent.sock"), watched.pid)

    watched.stdin.close()
    watched.wait(timeout=30)

    assert wait_until_gone(pid)


def test_the_forwarder_exits_on_sigterm(folder):
    watched = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    _, pid = start_forwarder(os.path.join(folder, "absent.sock"), watched.pid)

    os.kill(pid, signal.SIGTERM)

    assert wait_until_gone(pid)
    watched.stdin.close()
    watched.wait(timeout=30)


def test_the_forwarder_answers_502_when_the_proxy_is_not_running(folder, make_forwarder):
    port = make_forwarder(os.path.join(folder, "absent.sock"))

    raw = exchange(port, b"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n")

    assert raw.startswith(b"HTTP/1.1 502 skills_magic: the network proxy is not running\r\n")


def test_the_forwarder_says_why_it_cannot_start(folder):
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        busy = subprocess.run(forwarder_command(port, os.path.join(folder, "s"), os.getpid()), capture_output=True,
                              text=True, timeout=30)
    finally:
        taken.close()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = subprocess.run(forwarder_command(0, os.path.join(folder, "s"), gone.pid), capture_output=True,
                            text=True, timeout=30)

    assert (busy.returncode, busy.stdout) == (1, "")
    assert busy.stderr.startswith(f"skills_magic network forwarder: cannot listen on 127.0.0.1:{port}: ")
    assert (orphan.returncode, orphan.stdout) == (1, "")
    assert f"process {gone.pid}" in orphan.stderr and "already gone" in orphan.stderr


def test_the_forwarder_is_stdlib_only_and_import_skills_magic_does_not_load_the_proxy():
    compile(netproxy.FORWARDER_SOURCE, "forwarder", "exec")
    assert "skills_magic" not in "".join(line.split("#")[0] for line in netproxy.FORWARDER_SOURCE.splitlines()
                                         if line.lstrip().startswith(("import", "from")))
    assert forwarder_command(0, "/s", 7)[1:4] == ["-I", "-S", "-c"]
    check = "import sys, skills_magic; print('skills_magic.safety.netproxy' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert loaded.stdout.strip() == "False", loaded.stderr


# --- the whole chain in a fresh network namespace ---------------------------------------------------------------------
LOOPBACK_STATE = ("import fcntl, socket, struct; flags = struct.unpack_from('16sH', fcntl.ioctl(socket.socket("
                  "socket.AF_INET, socket.SOCK_DGRAM), 0x8913, struct.pack('16sH22x', b'lo', 0)))[1]; "
                  "print('up' if flags & 1 else 'down')")

INSIDE = """
import errno, http.client, json, socket, sys, urllib.error, urllib.request
proxy_port, web, blocked = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def direct(address):
    try:
        socket.create_connection(address, timeout=10).close()
        return 0
    except OSError as error:
        return error.errno

url = "http://127.0.0.1:%d" % proxy_port
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": url}))
result = {"direct_loopback": direct(("127.0.0.1", web)), "direct_outside": direct(("192.0.2.1", 80))}
result["proxied"] = opener.open("http://127.0.0.1:%d/" % web, timeout=10).read().decode()
tunnel = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
tunnel.set_tunnel("127.0.0.1", web)
tunnel.request("GET", "/")
result["tunnelled"] = tunnel.getresponse().read().decode()
try:
    opener.open("http://%s/" % blocked, timeout=10)
except urllib.error.HTTPError as error:
    result["blocked"] = [error.code, error.read().decode().strip()]
print(json.dumps(result))
"""


def user_and_network_namespaces() -> tuple[bool, str]:
    if shutil.which("unshare") is None:
        return False, "util-linux unshare is not installed"
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True, text=True,
                           timeout=30)
    return probe.returncode == 0, f"unshare --user --net cannot run here: {probe.stderr.strip()}"


def test_in_a_fresh_network_namespace_the_forwarder_brings_lo_up_and_the_proxy_is_the_only_way_out(web, make_proxy):
    possible, why = user_and_network_namespaces()
    if not possible:
        pytest.skip(why)
    proxy = make_proxy("127.0.0.1")
    python = shlex.quote(sys.executable)
    script = "\n".join([
        f"{python} -I -S -c {shlex.quote(LOOPBACK_STATE)}",
        forwarder_shell(proxy.socket_path, port=netproxy.SANDBOX_PROXY_PORT),
        'echo "$proxy_port"',
        f"{python} -I -S -c {shlex.quote(LOOPBACK_STATE)}",
        f'exec {python} -I -S -c {shlex.quote(INSIDE)} "$proxy_port" {web} {BLOCKED}',
    ])

    inside = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "sh", "-c", script],
                            capture_output=True, text=True, timeout=60)

    assert inside.returncode == 0, inside.stderr
    before, port, after, report = inside.stdout.splitlines()
    result = json.loads(report)
    assert (before, port, after) == ("down", str(netproxy.SANDBOX_PROXY_PORT), "up")
    assert result["direct_loopback"] == errno.ECONNREFUSED  # this namespace's loopback is not the host's
    assert result["direct_outside"] == errno.ENETUNREACH  # and there is no route anywhere else
    assert result["proxied"] == result["tunnelled"] == "hello from the web API"
    assert result["blocked"] == [403, refusal_line(BLOCKED)]
    assert proxy.reached == ["127.0.0.1"] and proxy.refused == [BLOCKED]
    assert all(wait_until_gone(pid) for pid in processes_running(proxy.socket_path))  # it watched the shell
