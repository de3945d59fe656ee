"""The seccomp filter every sandboxed process runs under: a classic BPF program bwrap installs (`--seccomp FD`).

socket(AF_UNIX) reaches host sockets by path (a new network namespace does not cover the filesystem: a Jupyter kernel
on the `ipc` transport, a Docker socket); io_uring can open sockets without the socket syscall; a foreign ABI (x32,
i386) has other syscall numbers, so the checks below would not see its calls. All three are refused with EPERM.
"""

from __future__ import annotations

import os
import platform
import struct

_SECCOMP_ARCH = {  # machine: (AUDIT_ARCH, socket, io_uring_setup)
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}
AF_UNIX = 1
_EPERM = 1


def seccomp_program(machine: str | None = None) -> bytes | None:
    """A classic BPF program (struct sock_filter[]) refusing socket(AF_UNIX, ...) and io_uring_setup with EPERM, and
    every syscall of a foreign ABI (x32, i386); None on a machine we have no numbers for."""
    numbers = _SECCOMP_ARCH.get(machine or platform.machine())
    if numbers is None:
        return None
    arch, socket_nr, io_uring_nr = numbers
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | _EPERM

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("<HBBI", code, jt, jf, k)

    program = [
        op(ld_w_abs, 0, 0, 4),  # 0: seccomp_data.arch
        op(jeq_k, 1, 0, arch),  # 1: our ABI: go on; else refuse
        op(ret_k, 0, 0, deny),  # 2
        op(ld_w_abs, 0, 0, 0),  # 3: seccomp_data.nr
        op(jge_k, 6, 0, 0x40000000),  # 4: x32 syscall numbers: refuse (jump to 11)
        op(jeq_k, 5, 0, io_uring_nr),  # 5: io_uring_setup: refuse (jump to 11)
        op(jeq_k, 1, 0, socket_nr),  # 6: socket: check its family
        op(ret_k, 0, 0, allow),  # 7
        op(ld_w_abs, 0, 0, 16),  # 8: args[0], low 32 bits (little-endian)
        op(jeq_k, 1, 0, AF_UNIX),  # 9: AF_UNIX: refuse
        op(ret_k, 0, 0, allow),  # 10
        op(ret_k, 0, 0, deny),  # 11
    ]
    return b"".join(program)


def seccomp_fd() -> int | None:
    """A pipe's read end holding the program, for bwrap's `--seccomp`; None on a machine we have no numbers for."""
    program = seccomp_program()
    if program is None:
        return None
    reader, writer = os.pipe()
    os.write(writer, program)  # a few hundred bytes: fits the pipe's buffer
    os.close(writer)
    return reader
