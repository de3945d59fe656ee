"""The network grant's parts: host patterns and address checks (`hosts`), the HTTP proxy that lets a sandboxed run
reach only its granted hosts (`proxy`, reading requests with `protocol` and copying bytes with `relay`), and the
forwarder program run inside the run's network namespace (`forwarder.py`, standard library only). How a run is
wired to them is `skills_magic.safety.netproxy`."""
