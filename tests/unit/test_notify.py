"""sd_notify, watchdog and socket activation without libsystemd (contract §6, §4).

Notifications go to real datagram sockets; activation runs in a child
process that receives its listening socket at fd 3 exactly as systemd hands
it over (``pass_fds`` + ``dup2``), so pytest's own descriptors are never
touched.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wardd.daemon.observe.sd_notify import (
    SYSTEMD_ENVIRONMENT,
    Notifier,
    scrub_environment,
    watchdog_interval,
)


@pytest.fixture
def receiver(short_dir: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket standing in for systemd's notify socket."""
    path = str(short_dir / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        yield sock, path


def received(sock: socket.socket) -> list[str]:
    return sock.recv(65536).decode().split("\n")


class TestNotifier:
    def test_each_message_reaches_the_notify_socket(
        self, receiver: tuple[socket.socket, str]
    ) -> None:
        """ready, watchdog, status and stopping each send their assignment."""
        sock, path = receiver
        notifier = Notifier.from_env({"NOTIFY_SOCKET": path})
        assert notifier.enabled
        assert notifier.ready()
        assert received(sock) == ["READY=1"]
        assert notifier.watchdog()
        assert received(sock) == ["WATCHDOG=1"]
        assert notifier.status("serving, 0 unknown attempts")
        assert received(sock) == ["STATUS=serving, 0 unknown attempts"]
        assert notifier.stopping()
        assert received(sock) == ["STOPPING=1", "STATUS=stopping"]

    def test_several_assignments_travel_in_one_datagram(
        self, receiver: tuple[socket.socket, str]
    ) -> None:
        """send(*lines) joins its lines with newlines into a single datagram."""
        sock, path = receiver
        assert Notifier.from_env({"NOTIFY_SOCKET": path}).send("READY=1", "STATUS=up")
        assert received(sock) == ["READY=1", "STATUS=up"]

    def test_status_cannot_inject_another_assignment(
        self, receiver: tuple[socket.socket, str]
    ) -> None:
        """A newline in the status text is flattened, never a second line."""
        sock, path = receiver
        Notifier.from_env({"NOTIFY_SOCKET": path}).status("bad\nREADY=1\r\nmore")
        assert received(sock) == ["STATUS=bad READY=1 more"]

    def test_abstract_namespace_address(self) -> None:
        """'@name' addresses the abstract socket '\\0name'."""
        name = f"wardd-test-{uuid.uuid4().hex}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(b"\0" + name.encode())
            sock.settimeout(5)
            notifier = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
            assert notifier.address == b"\0" + name.encode()
            assert notifier.ready()
            assert received(sock) == ["READY=1"]

    def test_missing_socket_is_a_quiet_no_op(self, short_dir: Path) -> None:
        """A notify socket that does not exist makes sends return False, not raise."""
        notifier = Notifier.from_env({"NOTIFY_SOCKET": str(short_dir / "gone")})
        assert notifier.enabled
        assert notifier.ready() is False
        assert notifier.watchdog() is False

    def test_socket_of_the_wrong_kind_is_a_quiet_no_op(self, short_dir: Path) -> None:
        """A stream socket at the notify path refuses datagrams; send still never raises."""
        path = str(short_dir / "stream")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(path)
            sock.listen()
            assert Notifier.from_env({"NOTIFY_SOCKET": path}).ready() is False

    @pytest.mark.parametrize(
        "value",
        ["", "relative/notify", "@", "vsock:2:1234", "/" + "x" * 200, "@" + "y" * 200],
    )
    def test_unusable_addresses_disable_notification(self, value: str) -> None:
        """Unset, relative, unsupported or overlong addresses give a disabled notifier."""
        notifier = Notifier.from_env({"NOTIFY_SOCKET": value} if value else {})
        assert not notifier.enabled
        assert notifier.ready() is False

    def test_defaults_to_the_process_environment(
        self, receiver: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """from_env() without arguments reads os.environ."""
        sock, path = receiver
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert Notifier.from_env().ready()
        assert received(sock) == ["READY=1"]


class TestWatchdogInterval:
    def test_half_the_period_in_seconds(self) -> None:
        """WATCHDOG_USEC=30 s asks for a ping every 15 s."""
        assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0

    def test_applies_when_watchdog_pid_is_ours(self) -> None:
        """WATCHDOG_PID naming this process keeps the watchdog."""
        env = {"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid())}
        assert watchdog_interval(env) == 0.5

    def test_ignored_when_watchdog_pid_is_another_process(self) -> None:
        """A watchdog meant for another pid (a parent that exec'd us) is not ours."""
        env = {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}
        assert watchdog_interval(env) is None

    @pytest.mark.parametrize("usec", [None, "", "0", "-5", "abc", "1.5", "٣"])
    def test_no_or_malformed_period_means_no_watchdog(self, usec: str | None) -> None:
        """Absent, zero, negative or non-decimal WATCHDOG_USEC disables the watchdog."""
        assert watchdog_interval({} if usec is None else {"WATCHDOG_USEC": usec}) is None

    def test_malformed_watchdog_pid_means_no_watchdog(self) -> None:
        """A WATCHDOG_PID that names no pid cannot be ours."""
        assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}) is None


class TestScrubEnvironment:
    def test_removes_every_service_manager_variable(self) -> None:
        """NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* go; everything else stays."""
        env = {name: "1" for name in SYSTEMD_ENVIRONMENT} | {"PATH": "/bin", "HOME": "/h"}
        scrub_environment(env)
        assert env == {"PATH": "/bin", "HOME": "/h"}

    def test_children_no_longer_inherit_them(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """After scrubbing os.environ a child process sees none of the variables."""
        for name in SYSTEMD_ENVIRONMENT:
            monkeypatch.setenv(name, "1")
        scrub_environment()
        out = subprocess.run(
            [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert not set(json.loads(out)) & set(SYSTEMD_ENVIRONMENT)


# ---------------------------------------------------------------------------
# Socket activation, in a child process that owns fd 3

_CHILD = textwrap.dedent(
    """
    import json, os, socket, sys
    from wardd.daemon.wire.activation import listen_fds

    fd = int(sys.argv[1])
    if fd != 3:
        os.dup2(fd, 3)
        os.close(fd)
    os.environ.update(json.loads(sys.argv[2]))
    if os.environ.get("LISTEN_PID") == "self":
        os.environ["LISTEN_PID"] = str(os.getpid())
    report = {}
    try:
        socks = listen_fds()
    except ValueError as exc:
        report["error"] = str(exc)
    else:
        report["sockets"] = []
        for s in socks:
            entry = {"fd": s.fileno(), "family": s.family.name, "type": s.type.name,
                     "inheritable": os.get_inheritable(s.fileno())}
            if s.family == socket.AF_UNIX and sys.argv[3]:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                    c.connect(sys.argv[3])
                    conn, _ = s.accept()
                    c.sendall(b"ping")
                    entry["accepted"] = conn.recv(4).decode()
                    conn.close()
            report["sockets"].append(entry)
    report["fd3_open"] = True
    try:
        os.fstat(3)
    except OSError:
        report["fd3_open"] = False
    report["env"] = sorted(k for k in os.environ if k.startswith("LISTEN_"))
    print(json.dumps(report))
    """
)


def activate(fd: int, env: dict[str, str], connect_to: str = "") -> dict[str, Any]:
    """Run _CHILD with ``fd`` moved to fd 3 and ``env`` added; return its report."""
    clean = {k: v for k, v in os.environ.items() if k not in SYSTEMD_ENVIRONMENT}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(fd), json.dumps(env), connect_to],
        pass_fds=(fd,),
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


ACTIVATED = {"LISTEN_PID": "self", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "wardd.socket"}


class TestListenFds:
    def test_passed_listening_socket_is_served(self, short_dir: Path) -> None:
        """fd 3 comes back as a close-on-exec AF_UNIX stream socket that accepts."""
        path = str(short_dir / "wardd.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lsock:
            lsock.bind(path)
            lsock.listen()
            report = activate(lsock.fileno(), ACTIVATED, connect_to=path)
        assert report["sockets"] == [
            {
                "fd": 3,
                "family": "AF_UNIX",
                "type": "SOCK_STREAM",
                "inheritable": False,
                "accepted": "ping",
            }
        ]
        assert report["env"] == []

    def test_variables_for_another_process_are_ignored_and_unset(self, short_dir: Path) -> None:
        """LISTEN_PID naming another pid means not activated; the variables still go."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lsock:
            lsock.bind(str(short_dir / "s"))
            lsock.listen()
            report = activate(lsock.fileno(), {"LISTEN_PID": "1", "LISTEN_FDS": "1"})
        assert report["sockets"] == []
        assert report["env"] == []
        assert report["fd3_open"]

    def test_not_activated_without_listen_pid(self) -> None:
        """No LISTEN_PID: no sockets, nothing raised."""
        assert _listen_fds_in_process({}) == []

    def test_datagram_socket_is_refused(self, short_dir: Path) -> None:
        """A Unix datagram socket at fd 3 is a clear ValueError, and fd 3 stays open."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dsock:
            dsock.bind(str(short_dir / "d"))
            report = activate(dsock.fileno(), ACTIVATED)
        assert "fd 3 is a AF_UNIX/SOCK_DGRAM socket" in report["error"]
        assert report["fd3_open"]
        assert report["env"] == []

    def test_inet_socket_is_refused(self) -> None:
        """A TCP listening socket is not the daemon's Unix socket."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tsock:
            tsock.bind(("127.0.0.1", 0))
            tsock.listen()
            report = activate(tsock.fileno(), ACTIVATED)
        assert "fd 3 is a AF_INET/SOCK_STREAM socket" in report["error"]

    def test_connected_stream_socket_is_refused(self) -> None:
        """A connected (Accept=yes style) Unix stream socket is not a listener."""
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with a, b:
            report = activate(a.fileno(), ACTIVATED)
        assert "not listening" in report["error"]

    def test_non_socket_descriptor_is_refused(self) -> None:
        """A pipe at fd 3 is named as not a socket."""
        r, w = os.pipe()
        try:
            report = activate(r, ACTIVATED)
        finally:
            os.close(r)
            os.close(w)
        assert "fd 3 is not a socket" in report["error"]

    def test_missing_descriptor_is_refused(self, short_dir: Path) -> None:
        """LISTEN_FDS=2 with only fd 3 passed names fd 4 as the culprit."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lsock:
            lsock.bind(str(short_dir / "s"))
            lsock.listen()
            report = activate(lsock.fileno(), {**ACTIVATED, "LISTEN_FDS": "2"})
        assert "fd 4 is not a socket" in report["error"]
        assert report["fd3_open"]

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            ({"LISTEN_PID": "abc", "LISTEN_FDS": "1"}, "LISTEN_PID='abc'"),
            ({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "-1"}, "LISTEN_FDS='-1'"),
            ({"LISTEN_PID": str(os.getpid())}, "LISTEN_FDS is not"),
        ],
    )
    def test_malformed_variables_are_refused_and_unset(
        self, env: dict[str, str], message: str
    ) -> None:
        """Malformed LISTEN_PID/LISTEN_FDS raise ValueError naming the variable."""
        environ = dict(env)
        with pytest.raises(ValueError, match=message):
            _listen_fds_in_process(environ)
        assert environ == {}

    def test_zero_descriptors_is_not_activated(self) -> None:
        """LISTEN_FDS=0 for this pid: no sockets."""
        environ = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}
        assert _listen_fds_in_process(environ) == []
        assert environ == {}


def _listen_fds_in_process(environ: dict[str, str]) -> list[socket.socket]:
    """In-process calls that never reach fd 3 (no activation, or refused early)."""
    from wardd.daemon.wire.activation import listen_fds

    return listen_fds(environ)
