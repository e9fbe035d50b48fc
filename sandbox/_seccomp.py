"""A seccomp filter that keeps a workload from making setuid or setgid files.

The workload runs as an unprivileged user (``_identity``), so a file it marks setuid belongs to
that user, not to root — but any host user who runs it would still become that user. The kernel
lets the owner of a file set those bits, so the only way to say "nothing a workload creates can
carry them" is to refuse the system calls that would set them:

* ``chmod``, ``fchmod``, ``fchmodat`` and ``fchmodat2`` whose mode has ``S_ISUID`` or ``S_ISGID``;
* ``open``, ``openat`` and ``creat`` that create a file (``O_CREAT`` or ``O_TMPFILE``) with such a
  mode, and ``mknod``/``mknodat`` with one (``mkdir`` drops both bits by itself);
* ``openat2`` (its mode sits in a structure a filter cannot read; libc falls back to ``openat``)
  and ``io_uring`` (its operations bypass system-call filters), which fail with ``ENOSYS``.

Refused calls fail with ``EPERM``; everything else is allowed. System calls of another ABI (32-bit
calls of a 64-bit process, x32) kill the process: the filter only understands the native one.
Device nodes need no rule: creating one takes ``CAP_MKNOD`` in the host's user namespace, which a
workload never has. The program is classic BPF built here for x86-64 and AArch64 (the only ABIs
whose numbers are listed); :func:`setuid_filter` returns ``None`` elsewhere, and the runners say
in their posture that the bits are then not filtered.
"""

from __future__ import annotations

import functools
import os
import platform
import struct

import attrs

__all__ = ["setuid_filter", "setuid_filter_fd"]

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000
_EPERM = 1
_ENOSYS = 38

_ARCH_OFFSET = 4
_NR_OFFSET = 0
_SPECIAL_BITS = 0o6000  # S_ISUID | S_ISGID
_CREATE_FLAGS = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE (same values on both ABIs)
_X32_BIT = 0x40000000


def _arg_low(index: int) -> int:
    """Offset of the low 32 bits of system-call argument ``index`` (little-endian ABIs)."""
    return 16 + 8 * index


@attrs.frozen
class _Rule:
    """A call refused when its mode argument has a special bit (and, if ``flags`` is set, only when
    the flags argument asks to create a file)."""

    number: int
    mode: int
    flags: int | None = None


@attrs.frozen
class _Abi:
    audit_arch: int
    rules: tuple[_Rule, ...]
    unsupported: tuple[int, ...]  # openat2, io_uring_setup/enter/register
    x32_bit: bool


_ABIS = {
    "x86_64": _Abi(
        audit_arch=0xC000003E,
        rules=(
            _Rule(90, mode=1),  # chmod(path, mode)
            _Rule(91, mode=1),  # fchmod(fd, mode)
            _Rule(268, mode=2),  # fchmodat(dirfd, path, mode)
            _Rule(452, mode=2),  # fchmodat2(dirfd, path, mode, flags)
            _Rule(2, mode=2, flags=1),  # open(path, flags, mode)
            _Rule(257, mode=3, flags=2),  # openat(dirfd, path, flags, mode)
            _Rule(85, mode=1),  # creat(path, mode)
            _Rule(133, mode=1),  # mknod(path, mode, dev)
            _Rule(259, mode=2),  # mknodat(dirfd, path, mode, dev)
        ),
        unsupported=(437, 425, 426, 427),
        x32_bit=True,
    ),
    "aarch64": _Abi(
        audit_arch=0xC00000B7,
        rules=(
            _Rule(52, mode=1),  # fchmod(fd, mode)
            _Rule(53, mode=2),  # fchmodat(dirfd, path, mode)
            _Rule(452, mode=2),  # fchmodat2(dirfd, path, mode, flags)
            _Rule(56, mode=3, flags=2),  # openat(dirfd, path, flags, mode)
            _Rule(33, mode=2),  # mknodat(dirfd, path, mode, dev)
        ),
        unsupported=(437, 425, 426, 427),
        x32_bit=False,
    ),
}


class _Assembler:
    """Classic BPF with forward jumps to labels, resolved when the program is encoded."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | int, str | int, int]] = []
        self._labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def load(self, offset: int) -> None:
        self._code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, value: int, when_true: str | int, when_false: str | int) -> None:
        self._code.append((op, when_true, when_false, value))

    def ret(self, value: int) -> None:
        self._code.append((_RET, 0, 0, value))

    def encode(self) -> bytes:
        out = bytearray()
        for index, (op, true, false, value) in enumerate(self._code):
            out += struct.pack(
                "=HBBI", op, self._offset(index, true), self._offset(index, false), value
            )
        return bytes(out)

    def _offset(self, index: int, target: str | int) -> int:
        """A jump target as the count of instructions skipped (0: the next one)."""
        if isinstance(target, int):
            return target
        skip = self._labels[target] - index - 1
        if not 0 <= skip <= 255:
            raise ValueError(f"jump to {target!r} out of range")
        return skip


def _program(abi: _Abi) -> bytes:
    asm = _Assembler()
    asm.load(_ARCH_OFFSET)
    asm.jump(_JEQ, abi.audit_arch, 0, "kill")
    asm.load(_NR_OFFSET)
    if abi.x32_bit:
        asm.jump(_JGE, _X32_BIT, "kill", 0)
    for number in abi.unsupported:
        asm.jump(_JEQ, number, "enosys", 0)
    for index, rule in enumerate(abi.rules):
        asm.jump(_JEQ, rule.number, f"rule{index}", 0)
    asm.ret(_ALLOW)
    for index, rule in enumerate(abi.rules):
        asm.label(f"rule{index}")
        if rule.flags is not None:
            asm.load(_arg_low(rule.flags))
            asm.jump(_JSET, _CREATE_FLAGS, 0, "allow")
        asm.load(_arg_low(rule.mode))
        asm.jump(_JSET, _SPECIAL_BITS, "eperm", "allow")
    asm.label("allow")
    asm.ret(_ALLOW)
    asm.label("eperm")
    asm.ret(_ERRNO | _EPERM)
    asm.label("enosys")
    asm.ret(_ERRNO | _ENOSYS)
    asm.label("kill")
    asm.ret(_KILL_PROCESS)
    return asm.encode()


@functools.cache
def setuid_filter() -> bytes | None:
    """The compiled filter for this machine's ABI, or ``None`` where it is not available."""
    abi = _ABIS.get(platform.machine())
    if abi is None or struct.pack("=H", 1) != b"\x01\x00":
        return None
    return _program(abi)


def setuid_filter_fd() -> int | None:
    """A fresh memfd holding :func:`setuid_filter`, positioned at its start, for bwrap's
    ``--seccomp``; ``None`` where there is no filter. One per spawn: bwrap reads it to the end, and
    a shared file offset would hand concurrent spawns an empty read. The caller closes it."""
    program = setuid_filter()
    if program is None:
        return None
    fd = os.memfd_create("effectagent-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
