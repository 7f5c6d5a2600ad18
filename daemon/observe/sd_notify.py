"""sd_notify(3) without libsystemd (contract §6, §3.6).

``wardd run`` tells its service manager how it is doing by sending
newline-separated ``KEY=VALUE`` assignments in one datagram to the
``AF_UNIX``/``SOCK_DGRAM`` socket named by ``$NOTIFY_SOCKET``:

- ``READY=1`` once recovery is done and requests are served (contract §3.6);
- ``WATCHDOG=1`` every :func:`watchdog_interval` seconds while the event
  loop, the writer thread and the worker threads are alive
  (``_lifecycle.watchdog`` proves it before each ping);
- ``STOPPING=1`` when SIGTERM/SIGINT starts the shutdown grace;
- ``STATUS=...`` a one-line human summary (``systemctl --user status``):
  ``recovering``, ``serving, N unknown attempts, M receipts pending``,
  ``stopping``.

It never sends ``EXTEND_TIMEOUT_USEC``: start-up is bounded by the unit's
``TimeoutStartSec`` and the stop by ``TimeoutStopSec``.

Without ``$NOTIFY_SOCKET`` (not started by systemd) every call is a no-op.
Notification is advisory: a send never raises, so a vanished or full notify
socket can never take the daemon down with it.

The daemon reads ``NOTIFY_SOCKET``, ``WATCHDOG_*`` and ``LISTEN_*`` once at
start, then calls :func:`scrub_environment`, so that no child (a ``cli``
adapter, a receipt program) inherits them and talks to systemd in the
daemon's name or mistakes the daemon's listening socket for its own::

    notifier = Notifier.from_env()
    interval = watchdog_interval()
    sockets = listen_fds()          # wardd.daemon.wire.activation
    scrub_environment()
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, MutableMapping

import attrs

__all__ = [
    "SYSTEMD_ENVIRONMENT",
    "Notifier",
    "scrub_environment",
    "watchdog_interval",
]

#: Variables the service manager hands to the daemon alone (sd_notify(3),
#: sd_watchdog_enabled(3), sd_listen_fds(3)). Never passed on to children.
SYSTEMD_ENVIRONMENT = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
)

# sockaddr_un.sun_path on Linux: 108 bytes, including the trailing NUL for a
# filesystem path (an abstract name may use all 108).
_SUN_PATH_MAX = 108


@attrs.frozen
class Notifier:
    """Sends sd_notify(3) messages to one notify socket, or nowhere.

    ``address`` is the ``sockaddr_un`` path as bytes: a filesystem path, or
    ``b"\\0name"`` for an abstract socket; ``None`` disables every send.
    ``timeout`` bounds how long a send may block on a full receive queue
    (the daemon calls it from its event loop).
    """

    address: bytes | None
    timeout: float = 1.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """The notifier ``$NOTIFY_SOCKET`` asks for, or a disabled one.

        An absolute path names a filesystem socket; a leading ``@`` names an
        abstract one (``@name`` → ``\\0name``), as in sd_notify(3). Anything
        else (unset, empty, relative, a ``vsock:`` address, too long) gives a
        disabled notifier: the daemon runs the same, unsupervised.
        """
        environ = os.environ if environ is None else environ
        return cls(_parse_address(environ.get("NOTIFY_SOCKET", "")))

    @property
    def enabled(self) -> bool:
        """Whether sends go anywhere."""
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send the assignments ``lines`` in one datagram.

        Returns whether the datagram was handed to the kernel. Never raises:
        no notify socket, a missing or refusing peer, a full queue past
        ``timeout`` all answer ``False``.
        """
        if self.address is None or not lines:
            return False
        payload = "\n".join(lines).encode("utf-8", "replace")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.settimeout(self.timeout)
                sock.sendto(payload, self.address)
        except (OSError, ValueError):
            return False
        return True

    def ready(self) -> bool:
        """``READY=1``: start-up (migration, recovery) is complete (contract §3.6)."""
        return self.send("READY=1")

    def stopping(self) -> bool:
        """``STOPPING=1`` and ``STATUS=stopping``: the shutdown grace began (contract §3.6)."""
        return self.send("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the keep-alive ping ``WatchdogSec=`` asks for."""
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        """``STATUS=<text>``, on one line.

        Line breaks become spaces: a newline in ``text`` must never smuggle
        in another assignment such as ``READY=1``.
        """
        return self.send("STATUS=" + " ".join(text.splitlines()))


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings, or ``None`` for no watchdog.

    Per sd_watchdog_enabled(3): ``$WATCHDOG_USEC`` is the period and applies
    only when ``$WATCHDOG_PID`` is absent or names this process. The ping
    interval is half the period, as the man page recommends, so one late
    tick never costs a restart. Malformed or non-positive values are no
    watchdog.
    """
    environ = os.environ if environ is None else environ
    usec = _positive_int(environ.get("WATCHDOG_USEC"))
    if usec is None:
        return None
    if "WATCHDOG_PID" in environ and _positive_int(environ["WATCHDOG_PID"]) != os.getpid():
        return None
    return usec / 2 / 1_000_000


def scrub_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Remove the service manager's variables (:data:`SYSTEMD_ENVIRONMENT`).

    Deleting from ``os.environ`` also unsets them in the process
    environment, so no child started afterwards inherits them (contract §6:
    a ``cli`` act never sees ``NOTIFY_SOCKET`` or ``LISTEN_*``).
    """
    environ = os.environ if environ is None else environ
    for name in SYSTEMD_ENVIRONMENT:
        environ.pop(name, None)


def _parse_address(value: str) -> bytes | None:
    if value.startswith("@") and len(value) > 1:
        address = b"\0" + os.fsencode(value[1:])
        return address if len(address) <= _SUN_PATH_MAX else None
    if value.startswith("/"):
        address = os.fsencode(value)
        return address if len(address) < _SUN_PATH_MAX and b"\0" not in address else None
    return None


def _positive_int(value: str | None) -> int | None:
    if value is None or not value.isascii() or not value.isdigit():
        return None
    number = int(value)
    return number if number > 0 else None
