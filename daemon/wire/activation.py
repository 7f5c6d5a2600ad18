"""Socket activation: the listening sockets systemd passes in (contract §4).

The protocol of sd_listen_fds(3), without libsystemd: when ``$LISTEN_PID``
is this process's pid, ``$LISTEN_FDS`` descriptors starting at fd 3
(``SD_LISTEN_FDS_START``) are open listening sockets the daemon must serve
instead of binding its own. ``wardd.socket`` passes exactly one, a Unix
stream socket (``ListenStream=%t/wardd/wardd.sock``).

Like ``sd_listen_fds(unset_environment=1)``, :func:`listen_fds` unsets the
``LISTEN_*`` variables whatever it finds, and marks the descriptors
close-on-exec, so that no child (a ``cli`` adapter) inherits either.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping

__all__ = ["LISTEN_FDS_START", "listen_fds"]

#: SD_LISTEN_FDS_START: the first passed descriptor.
LISTEN_FDS_START = 3

_LISTEN_ENVIRONMENT = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def listen_fds(environ: MutableMapping[str, str] | None = None) -> list[socket.socket]:
    """The listening Unix stream sockets passed by socket activation.

    Returns ``[]`` when the daemon was not socket-activated: ``$LISTEN_PID``
    unset, or naming another process (the variables were meant for a parent
    that exec'd us without clearing them). Otherwise returns one
    ``socket.socket`` per passed descriptor, fds 3 … 3 + ``$LISTEN_FDS`` − 1,
    in order, each made close-on-exec.

    Raises ``ValueError`` naming the variable or the descriptor when
    ``$LISTEN_PID``/``$LISTEN_FDS`` are malformed or a passed descriptor is
    not a listening ``AF_UNIX``/``SOCK_STREAM`` socket (e.g. a socket unit
    edited to ``ListenDatagram=`` or ``Accept=yes``): serving the wrong kind
    of socket is a configuration error, not something to guess around. On
    error no descriptor is closed or changed.

    The ``LISTEN_*`` variables are removed from ``environ`` (default: the
    process environment) in every case.
    """
    environ = os.environ if environ is None else environ
    try:
        count = _activated_count(environ)
    finally:
        for name in _LISTEN_ENVIRONMENT:
            environ.pop(name, None)
    sockets: list[socket.socket] = []
    try:
        for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + count):
            sockets.append(_listening_unix_stream(fd))
    except ValueError:
        for sock in sockets:
            sock.detach()  # leave the descriptors as systemd passed them
        raise
    for sock in sockets:
        sock.set_inheritable(False)
    return sockets


def _activated_count(environ: MutableMapping[str, str]) -> int:
    pid_text = environ.get("LISTEN_PID")
    if pid_text is None:
        return 0
    pid = _parse_uint("LISTEN_PID", pid_text)
    if pid != os.getpid():
        return 0
    fds_text = environ.get("LISTEN_FDS")
    if fds_text is None:
        raise ValueError("socket activation: LISTEN_PID is set but LISTEN_FDS is not")
    return _parse_uint("LISTEN_FDS", fds_text)


def _parse_uint(name: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"socket activation: {name}={text!r} is not a non-negative integer")
    return int(text)


def _listening_unix_stream(fd: int) -> socket.socket:
    try:
        sock = socket.socket(fileno=fd)  # family and type are read from the fd
    except OSError as exc:
        raise ValueError(
            f"socket activation: fd {fd} is not a socket ({exc.strerror or exc})"
        ) from exc
    try:
        family, kind = sock.family, sock.type
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 0
    except OSError as exc:  # pragma: no cover - the fd was just inspected
        sock.detach()
        raise ValueError(f"socket activation: fd {fd} cannot be inspected ({exc})") from exc
    if family != socket.AF_UNIX or kind != socket.SOCK_STREAM:
        sock.detach()
        raise ValueError(
            f"socket activation: fd {fd} is a {_name(family)}/{_name(kind)} socket, "
            "not AF_UNIX/SOCK_STREAM (wardd.socket needs ListenStream= with a path)"
        )
    if not listening:
        sock.detach()
        raise ValueError(
            f"socket activation: fd {fd} is a Unix stream socket that is not listening "
            "(wardd.socket needs Accept=no)"
        )
    return sock


def _name(value: int) -> str:
    return getattr(value, "name", str(value))
