"""skills_magic network forwarder: 127.0.0.1:PORT in this network namespace <-> the proxy's unix socket.

argv: PORT (0: pick one) SOCKET_PATH [WATCH_PID]. Brings lo up, listens, prints the port on stdout, and daemonises:
the parent exits 0 once the child listens, so `port=$(python ...)` returns ready. The child exits on SIGTERM or
SIGINT, or when WATCH_PID (0: none) is gone.

A program, not a module of the package: its text is run with `python -I -S -c SOURCE PORT SOCKET_PATH [WATCH_PID]`
(`netproxy.forwarder_command`) in the run's network namespace, outside bubblewrap and its seccomp filter. So it uses
the standard library only and never imports skills_magic, and it starts in milliseconds. One thread, one selector
loop: it counts as one process against the run's pids limit, however many connections.
"""
import fcntl, os, selectors, signal, socket, struct, sys, time

MAX_CONNECTIONS = 256  # above the proxy's own limit, so the proxy's clear 503 is what a client sees
CHUNK = 65536  # bytes per recv, and the most held per direction
IDLE_SECONDS = 900.0  # the proxy closes idle tunnels sooner; this only sweeps pairs whose other end vanished
POLL_SECONDS = 0.2  # how often WATCH_PID is checked when no pidfd can be had
CONNECT_SECONDS = 5.0  # the proxy's socket is local: a longer wait means it is gone or stuck
R, W = selectors.EVENT_READ, selectors.EVENT_WRITE


def fail(message):
    sys.stderr.write("skills_magic network forwarder: " + message + "\n")
    sys.stderr.flush()
    os._exit(1)


def loopback_up():
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        flags = struct.unpack_from("16sH", fcntl.ioctl(probe, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0)))[1]
        if flags & IFF_UP:
            return
        try:
            fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
        except OSError as error:
            fail("cannot bring the loopback interface up: " + (error.strerror or str(error)))
    finally:
        probe.close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Side:
    __slots__ = ("sock", "peer", "out", "eof", "shut", "events", "pair")

    def __init__(self, sock, pair):
        self.sock, self.pair = sock, pair
        self.peer, self.out, self.eof, self.shut, self.events = None, bytearray(), False, False, 0


class Pair:
    __slots__ = ("a", "b", "last")

    def __init__(self, tcp, unix):
        self.a, self.b = Side(tcp, self), Side(unix, self)
        self.a.peer, self.b.peer = self.b, self.a
        self.last = time.monotonic()


def serve(listener, path, watch, watch_fd):
    selector = selectors.DefaultSelector()
    selector.register(listener, R, "listen")
    if watch_fd is not None:
        selector.register(watch_fd, R, "watch")
    pairs = set()
    listening = True

    def close(pair):
        for side in (pair.a, pair.b):
            if side.events:
                selector.unregister(side.sock)
                side.events = 0
            side.sock.close()
        pairs.discard(pair)

    def refresh(pair):
        for side in (pair.a, pair.b):
            if side.peer.eof and not side.out and not side.shut:
                try:
                    side.sock.shutdown(socket.SHUT_WR)  # pass the other side's end-of-file on: a half-close
                except OSError:
                    pass
                side.shut = True
        if pair.a.eof and pair.b.eof and not pair.a.out and not pair.b.out:
            return close(pair)
        for side in (pair.a, pair.b):
            events = (R if not side.eof and len(side.peer.out) < CHUNK else 0) | (W if side.out else 0)
            if events != side.events:
                if not side.events:
                    selector.register(side.sock, events, side)
                elif not events:
                    selector.unregister(side.sock)
                else:
                    selector.modify(side.sock, events, side)
                side.events = events

    def accept():
        while len(pairs) < MAX_CONNECTIONS:
            try:
                tcp, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the backlog keeps the client until a pair closes
                return
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.settimeout(CONNECT_SECONDS)
            try:
                unix.connect(path)
            except OSError:
                unix.close()
                try:
                    tcp.setblocking(False)
                    tcp.send(b"HTTP/1.1 502 skills_magic: the network proxy is not running\r\n"
                             b"Content-Length: 0\r\nConnection: close\r\nX-Skills-Magic: unreachable\r\n\r\n")
                except OSError:
                    pass
                tcp.close()
                continue
            tcp.setblocking(False)
            unix.setblocking(False)
            pair = Pair(tcp, unix)
            pairs.add(pair)
            refresh(pair)

    last_sweep = time.monotonic()
    while True:
        timeout = POLL_SECONDS if watch and watch_fd is None else 1.0
        for key, mask in selector.select(timeout):
            if key.data == "watch":
                os._exit(0)
            if key.data == "listen":
                accept()
                continue
            side = key.data
            pair = side.pair
            if pair not in pairs:
                continue
            try:
                if mask & R:
                    try:
                        data = side.sock.recv(CHUNK)
                    except (BlockingIOError, InterruptedError):
                        data = None
                    if data:
                        side.peer.out += data
                        pair.last = time.monotonic()
                    elif data is not None:
                        side.eof = True
                if mask & W and side.out:
                    try:
                        sent = side.sock.send(side.out)
                    except (BlockingIOError, InterruptedError):
                        sent = 0
                    del side.out[:sent]
                    pair.last = time.monotonic()
                refresh(pair)
            except OSError:  # a reset or a broken pipe ends the pair
                close(pair)
        if watch and watch_fd is None and not alive(watch):
            os._exit(0)
        now = time.monotonic()
        if now - last_sweep > 1.0:
            last_sweep = now
            for pair in [p for p in pairs if now - p.last > IDLE_SECONDS]:
                close(pair)
        if listening != (len(pairs) < MAX_CONNECTIONS):  # full: leave new clients in the backlog until one ends
            listening = not listening
            if listening:
                selector.register(listener, R, "listen")
                accept()
            else:
                selector.unregister(listener)


def main(argv):
    if len(argv) not in (2, 3):
        fail("usage: PORT SOCKET_PATH [WATCH_PID]")
    try:
        port, path, watch = int(argv[0]), argv[1], int(argv[2]) if len(argv) == 3 else 0
    except ValueError:
        fail("PORT and WATCH_PID must be numbers")
    loopback_up()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        listener.setblocking(False)
    except OSError as error:
        fail("cannot listen on 127.0.0.1:%d: %s" % (port, error.strerror or error))
    watch_fd = None
    if watch:
        try:
            watch_fd = os.pidfd_open(watch)  # readable the moment that process ends; no polling, no pid reuse
        except ProcessLookupError:
            fail("process %d, which it should outlive no longer than, is already gone" % watch)
        except (AttributeError, OSError):
            watch_fd = None
            if not alive(watch):
                fail("process %d, which it should outlive no longer than, is already gone" % watch)
    chosen = listener.getsockname()[1]
    if os.fork():
        sys.stdout.write("%d\n" % chosen)
        sys.stdout.flush()
        os._exit(0)
    # the daemon: hold no pipe of the caller's open (a `$(...)` would wait for it), stop on a signal
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: os._exit(0))
    try:
        serve(listener, path, watch, watch_fd)
    finally:
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
