"""Real daemon processes for tests: a temp dir, a config, a socket, a database.

Readiness is synchronized on the daemon's own ``READY=1`` (sd_notify on a
datagram socket this harness binds), never on a sleep.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

from tests import _leftovers
from tests._poll import wait_for
from wardd.client import Client, Neuron
from wardd.daemon.store.counters import Counters, count_afresh
from wardd.daemon.store.schema import SCHEMA_VERSION

NETWORK = "test-net"
START_TIMEOUT = 30.0
#: Under `make coverage` (its subprocess patch sets this), daemons are stopped
#: with SIGTERM at cleanup so that they write their coverage data.
MEASURED = "COVERAGE_PROCESS_CONFIG" in os.environ
_BASE: list[str] = []
#: Daemons a module-scoped fixture keeps for several tests (``Daemon(env,
#: shared=True)``): the guard in tests/conftest.py leaves them, and what runs
#: below them, alone after each test; not after the last (the session's end).
_SHARED: weakref.WeakSet[Daemon] = weakref.WeakSet()


def shared_pids() -> set[int]:
    """The pids of the shared daemons now running (see `_SHARED`)."""
    return {d.proc.pid for d in list(_SHARED) if d.proc is not None}


def _base() -> str:
    """One short temp dir per test process, removed at exit (kept with
    WARDD_TEST_KEEP=1): every Env lives under it (socket paths stay short)."""
    if not _BASE:
        _BASE.append(tempfile.mkdtemp(prefix="wardd-t-", dir="/tmp"))
        if os.environ.get("WARDD_TEST_KEEP") != "1":
            atexit.register(shutil.rmtree, _BASE[0], True)
    return _BASE[0]


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


class Env:
    """A temp dir holding the config, socket, database and act ledgers."""

    def __init__(
        self, *, workers: int = 2, acts: dict[str, dict[str, Any]] | None = None, **top: Any
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="e-", dir=_base()))
        self.socket = self.root / "s.sock"
        self.database = self.root / "db" / "wardd.db"
        self.ledger = self.root / "ledger.log"  # file.append act "ledger"
        self.cli_ledger = self.root / "cli-ledger.log"  # cli acts append their key here
        self.started = self.root / "started"
        self.gates = self.root / "gates"
        self.started.mkdir()
        self.gates.mkdir()
        self.config = self.root / "wardd.toml"
        self.top = {
            "network": NETWORK,
            "socket": str(self.socket),
            "database": str(self.database),
            "workers": workers,
            **top,
        }
        self.acts = self.default_acts()
        self.acts.update(acts or {})
        self.write_config()

    def default_acts(self) -> dict[str, dict[str, Any]]:
        q = shlex.quote
        key = '"$WARDD_IDEMPOTENCY_KEY"'
        started = f'{q(str(self.started))}/"$WARDD_OP.$WARDD_ATTEMPT"'
        gate = f'{q(str(self.gates))}/"$WARDD_OP.$WARDD_ATTEMPT"'

        def sh(script: str) -> list[str]:
            return ["/bin/sh", "-c", script]

        return {
            "ledger": {"adapter": "file.append", "path": str(self.ledger)},
            "quick": {"adapter": "cli", "argv": sh(f"echo {key} >> {q(str(self.cli_ledger))}")},
            "nofx": {"adapter": "cli", "argv": sh("exit 2"), "no_effect_exits": [2]},
            "boom": {"adapter": "cli", "argv": sh("exit 7")},
            # marks its start, then waits for the test to open its gate (at most ~30 s)
            "gated": {
                "adapter": "cli",
                "argv": sh(
                    f"touch {started}; i=0; while [ ! -e {gate} ]; do "
                    "if [ $i -ge 600 ]; then exit 3; fi; sleep 0.05; i=$((i+1)); done; "
                    f"echo {key} >> {q(str(self.cli_ledger))}"
                ),
            },
        }

    def write_config(self) -> None:
        out = [f"{k} = {toml_value(v)}" for k, v in self.top.items()]
        for tag, table in self.acts.items():
            out.append(f"\n[acts.{json.dumps(tag)}]")
            out.extend(f"{k} = {toml_value(v)}" for k, v in table.items())
        self.config.write_text("\n".join(out) + "\n")

    def started_marker(self, op: str, attempt: int = 1) -> Path:
        return self.started / f"{op}.{attempt}"

    def open_gate(self, op: str, attempt: int = 1) -> None:
        (self.gates / f"{op}.{attempt}").touch()

    def ledger_lines(self, path: Path | None = None) -> list[str]:
        p = path or self.ledger
        return p.read_text().splitlines() if p.exists() else []


DATA = Path(__file__).resolve().parents[1] / "data"


def on_fixture(version: int, **top: Any) -> Env:
    """An Env whose database is a copy of tests/data/schema-v<version>.db (a
    database an earlier wardd wrote and left as it was when it was killed);
    no daemon started."""
    env = Env(**top)
    env.database.parent.mkdir(parents=True)
    shutil.copy(DATA / f"schema-v{version}.db", env.database)
    return env


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a daemon child, without the systemd
    variables a test did not mean to pass on, plus ``extra``."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "LISTEN_", "WATCHDOG_"))
    }
    env.update(extra or {})
    return env


class DaemonFailed(AssertionError):
    pass


class Daemon:
    """One daemon process at a time on an Env; restartable.

    `cleanup` ends it and everything it started, also the programs an
    earlier `kill` left running without a parent: a test leaves nothing.
    """

    def __init__(self, env: Env, *, shared: bool = False) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.boot: str | None = None
        self.logs: list[Path] = []
        self.clients: list[Client] = []
        self.orphans: list[_leftovers.Proc] = []  # what a `kill` left running
        if shared:
            _SHARED.add(self)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "wardd.daemon.cli", "run", "--config", str(self.env.config)]

    def spawn(self, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.env.root / f"daemon-{len(self.logs)}.log"
        self.logs.append(log)
        env = child_env(extra_env)
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return self.proc

    def start(self, extra_env: dict[str, str] | None = None) -> Daemon:
        """Start and wait for READY=1 on a notify socket of our own."""
        path = self.env.root / f"notify-{len(self.logs)}"
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(str(path))
        ns.settimeout(START_TIMEOUT)
        try:
            self.spawn({"NOTIFY_SOCKET": str(path), **(extra_env or {})})
            while True:
                try:
                    msg = ns.recv(4096).decode()
                except TimeoutError:
                    self.proc.kill()  # type: ignore[union-attr]
                    why = f"no READY=1 within {START_TIMEOUT}s\n{self.log_text()}"
                    raise DaemonFailed(why) from None
                if "READY=1" in msg.split("\n"):
                    break
        finally:
            ns.close()
        with self.connect() as c:
            self.boot = c.hello_result.boot
        return self

    def connect(self, **kw: Any) -> Client:
        c = Client(str(self.env.socket), **kw)
        self.clients.append(c)
        return c

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def events(self, run: int | None = None) -> list[dict[str, Any]]:
        """The daemon's JSON log lines: of every run (``None``), or of run
        ``run`` (``-1``: the last). The suite's one reader of the log."""
        paths = self.logs if run is None else [self.logs[run]]
        out = []
        for path in paths:
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict):
                    out.append(item)
        return out

    def logged(self, event: str, *, run: int | None = None, **fields: Any) -> list[dict[str, Any]]:
        """The log lines of ``event`` whose fields have these values (see `events`)."""
        return [
            e
            for e in self.events(run)
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]

    def terminate(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def _stop_to_keep_coverage(self) -> None:
        """SIGTERM, then a second one to end the grace: a daemon that exits writes its
        coverage data, one that is SIGKILLed loses it (bounded; a SIGKILL follows)."""
        assert self.proc is not None
        for _ in range(2):
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
                return
            except subprocess.TimeoutExpired:
                pass

    def kill(self) -> None:
        """A real crash: SIGKILL (the adapters' children live on, until `cleanup`)."""
        if self.proc is not None and self.proc.poll() is None:
            self.orphans.extend(_leftovers.descendants(self.proc.pid))
            self.proc.kill()
            self.proc.wait()
        self.close_clients()

    def close_clients(self) -> None:
        for c in self.clients:
            c.close()
        self.clients.clear()

    def cleanup(self) -> None:
        """End the daemon and every process it started (its adapters' programs
        and what they started, also those a `kill` orphaned)."""
        _SHARED.discard(self)
        self.close_clients()
        below = list(self.orphans)
        if self.proc is not None and self.proc.poll() is None:
            below.extend(_leftovers.descendants(self.proc.pid))
            if MEASURED:
                self._stop_to_keep_coverage()
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _leftovers.end(below)
        self.orphans.clear()
        # the counts the next start would read are the rows' (store/counters.py:
        # a counting mistake in memory would persist in the snapshot)
        drift = counts_left(self.env.database)
        assert drift is None, f"{self.env.database}: {drift}"


def counts_left(database: Path) -> str | None:
    """:func:`counts_differ` on the database file a stopped daemon left, in
    one snapshot; None as well when the file is no wardd database of this
    version (a test broke or replaced it on purpose). Opened read-only: a
    database a SIGKILL left keeps its WAL for whoever looks at it next."""
    if not database.exists():
        return None
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, isolation_level=None)
    try:
        conn.execute("BEGIN")  # one snapshot for both counts, whoever else writes
        try:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
        except sqlite3.DatabaseError:  # not a database at all
            return None
        if version != SCHEMA_VERSION:
            return None
        return counts_differ(conn)
    finally:
        conn.close()


def counts_differ(conn: sqlite3.Connection) -> str | None:
    """What differs between the counts the next start would read back (the
    snapshot and its catch-up: ops by state, and the pruning figures; the
    unknown attempts are counted at each start) and a fresh count of the
    rows; None when they agree."""
    seeded = Counters()
    seeded.seed(conn)
    kept, rows = seeded.figures.wire(), count_afresh(conn).wire()
    return None if kept == rows else f"a start would read {kept}, the rows say {rows}"


class Actor:
    """A registered neuron with one prog, a grant and a bound placement."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        acts: tuple[str, ...] = ("echo",),
        worker: int = 0,
        prog: str = "prog-a",
        step_limit: int = 1000,
        neuron: Neuron | None = None,
    ) -> None:
        self.daemon = daemon
        self.neuron = neuron or Neuron.generate()
        self.client = daemon.connect()
        self.prog = prog
        self.call("register_neuron", {})
        self.call("create_prog", {"prog": prog, "step_limit": step_limit})
        self.grant(list(acts))
        self.bind(worker)

    @property
    def id(self) -> str:
        return self.neuron.id

    def call(self, method: str, params: dict[str, Any], client: Client | None = None) -> Any:
        return (client or self.client).call(method, self.neuron.sign(method, params, NETWORK))

    def read(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.call(method, params or {})

    def root(self) -> dict[str, Any]:
        return self.read("get_neuron", {"neuron": self.id})

    def op(self, op: str) -> dict[str, Any]:
        return self.read("get_operation", {"neuron": self.id, "op": op})

    def get_prog(self, prog: str | None = None) -> dict[str, Any]:
        return self.read("get_prog", {"neuron": self.id, "prog": prog or self.prog})

    def prog_state_params(
        self, expected: str, state: str, prog: str | None = None
    ) -> dict[str, Any]:
        """set_prog_state params fenced like the bundled clients: with the
        prog's current state_version (contract §3.4)."""
        prog = prog or self.prog
        version = self.get_prog(prog)["state_version"]
        return {
            "prog": prog,
            "expected_state": expected,
            "state": state,
            "expected_state_version": version,
        }

    def state(self, op: str) -> str:
        return self.op(op)["state"]

    def history(self, op: str) -> list[dict[str, Any]]:
        return self.read("history", {"neuron": self.id, "op": op})["records"]

    def grant(self, acts: list[str], *, enabled: bool = True, prog: str | None = None) -> Any:
        return self.call(
            "set_grant",
            {
                "prog": prog or self.prog,
                "acts": acts,
                "enabled": enabled,
                "expected_policy_version": self.root()["policy_version"],
            },
        )

    def descriptor(self, worker: int) -> dict[str, Any]:
        for w in self.read("list_workers")["workers"]:
            if w["worker"] == f"w{worker}":
                return w["descriptor"]
        raise AssertionError(f"no worker w{worker}")

    def bind(self, worker: int = 0) -> Any:
        return self.call(
            "bind_placement",
            {
                "expected_generation": self.root()["placement_generation"],
                "descriptor": self.descriptor(worker),
            },
        )

    def submit(self, op: str, act: str = "echo", args: bytes = b"", prog: str | None = None) -> Any:
        return self.call("submit", {"prog": prog or self.prog, "op": op, "act": act, "args": args})

    def prepare_params(self, op: str, attempt: int = 1) -> dict[str, Any]:
        r = self.root()
        return {
            "op": op,
            "expected_attempt": attempt,
            "placement_generation": r["placement_generation"],
            "expected_epoch": r["epoch"],
        }

    def prepare(
        self, op: str, attempt: int = 1, client: Client | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        res = self.call("prepare", self.prepare_params(op, attempt), client=client)
        return res["token"], res["attempt"]

    def execute(self, token: bytes, client: Client | None = None) -> Any:
        return (client or self.client).call("execute", {"token": token})

    def invoke(self, op: str, attempt: int = 1, client: Client | None = None) -> Any:
        return self.call("invoke", self.prepare_params(op, attempt), client=client)


def code_of(fn: Any, *args: Any, **kw: Any) -> Any:
    """The WarddError that ``fn(*args, **kw)`` raises (the test fails if none)."""
    import pytest

    from wardd.protocol import WarddError

    with pytest.raises(WarddError) as ei:
        fn(*args, **kw)
    return ei.value


def boot_row(env: Env, boot: str | None) -> tuple[Any, Any]:
    """A boot's (clean, stopped_at) row, read from the database as the stop left it."""
    db = sqlite3.connect(f"file:{env.database}?mode=ro", uri=True)
    try:
        return db.execute(
            "SELECT clean, stopped_at FROM boots WHERE boot_id = ?", (boot,)
        ).fetchone()
    finally:
        db.close()


class Background:
    """A blocking call run on a thread, its result taken later.

    Not a daemon thread: the call is to a daemon the test's fixture ends,
    which ends the call; the guard in tests/conftest.py checks that it did.
    """

    def __init__(self, fn: Any, *args: Any) -> None:
        import threading

        self.value: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()

        def run() -> None:
            try:
                self.value = fn(*args)
            except BaseException as e:  # noqa: BLE001
                self.error = e
            finally:
                self.done.set()

        threading.Thread(target=run, name=f"background {fn!r}").start()

    def result(self, timeout: float = 60) -> Any:
        assert self.done.wait(timeout), "background call did not finish"
        if self.error is not None:
            raise self.error
        return self.value

    def error_of(self, timeout: float = 30.0) -> BaseException:
        """The error the call ended with (the test fails if it returned)."""
        assert self.done.wait(timeout), "background call did not finish"
        assert self.error is not None, f"expected an error, got {self.value!r}"
        return self.error


def key(actor: Actor, op: str, attempt: int = 1) -> str:
    """The idempotency key an act receives: ``<neuron>/<op>/<attempt>``."""
    return f"{actor.id}/{op}/{attempt}"


def run_wardctl(
    env: Env, *args: str, key: Path | None = None, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """A real ``wardctl`` process against ``env``'s daemon (key: ``neuron.key``
    in the env's root unless given)."""
    e = {
        **os.environ,
        "WARDD_SOCKET": str(env.socket),
        "WARDD_KEY": str(key or env.root / "neuron.key"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "wardd.client.wardctl", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
    )
    if check:
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


class ReadLease:
    """A read lease (``fcntl(F_SETLEASE)``) held on a file by the test process.

    While it is held, another process's ``open(2)`` of the file for writing
    blocks (for up to ``/proc/sys/fs/lease-break-time``) and the lease shows
    the break at once: `breaking` turns true. So a ``file.append`` call can
    be held after its claim is committed and before its write, for as long as
    the test needs, and then released or killed — no timing involved. A
    read-only open (the claim's stat of the file) does not break it.
    """

    def __init__(self, path: Path) -> None:
        # the break is also signalled (SIGIO, whose default action kills):
        # we poll the lease instead
        self._old = signal.signal(signal.SIGIO, signal.SIG_IGN)
        self.fd: int | None = os.open(path, os.O_RDONLY)
        fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)

    def breaking(self) -> bool:
        """A writer's open is waiting for the lease."""
        assert self.fd is not None
        return fcntl.fcntl(self.fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK

    def release(self) -> None:
        """Let the blocked open go on (closing the descriptor drops the lease)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            signal.signal(signal.SIGIO, self._old)

    def __enter__(self) -> ReadLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Hold:
    """A test hook's directory and its FIFOs (adapters/_hold.py): the daemon
    started with ``env`` stops at each armed point until the test lets go."""

    def __init__(self, root: Path, variable: str, points: tuple[str, ...]) -> None:
        self.dir = root / "hold"
        self.dir.mkdir()
        self.variable = variable
        self.points = points
        self.fds: list[int] = []

    @property
    def env(self) -> dict[str, str]:
        return {self.variable: str(self.dir)}

    def arm(self) -> None:
        """From now on the daemon stops at each point."""
        for point in self.points:
            os.mkfifo(self.dir / point)

    def reached(self, point: str) -> int:
        """Wait until the daemon stands at ``point`` (it holds the FIFO open
        for reading); it goes on once the returned descriptor is closed."""
        got: list[int] = []

        def opened() -> bool:
            try:
                got.append(os.open(self.dir / point, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader yet: not there
                    return False
                raise
            return True

        wait_for(opened, what=f"the daemon to stop at {point!r}")
        self.fds.append(got[0])
        return got[0]

    def let_go(self, fd: int) -> None:
        self.fds.remove(fd)
        os.close(fd)

    def disarm(self) -> None:
        """Remove the FIFOs and close what the test still holds."""
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
        for point in self.points:
            (self.dir / point).unlink(missing_ok=True)


# A stand-in for systemd's socket activation: dup the given fd to 3, set
# LISTEN_FDS/LISTEN_PID for this very process, then exec the daemon (same pid).
_ACTIVATE = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "os.dup2(fd, 3)\n"
    "os.set_inheritable(3, True)\n"
    "os.environ['LISTEN_FDS'] = '1'\n"
    "os.environ['LISTEN_PID'] = str(os.getpid())\n"
    "os.execv(sys.executable, [sys.executable] + sys.argv[2:])\n"
)


def reap(proc: subprocess.Popen[Any]) -> None:
    """End ``proc`` and everything below it, unless it has exited, and reap it
    (for a ``finally``: a test leaves no process behind, pass or fail)."""
    if proc.poll() is None:  # unreaped, so its pid still names it
        me = _leftovers.identify(proc.pid)
        _leftovers.end([me] if me is not None else [])
    proc.kill()  # does nothing once it has been reaped
    proc.wait()


def spawn_activated(env: Env, sock: socket.socket, log: Path) -> subprocess.Popen[bytes]:
    """``wardd run`` on ``env``'s config, socket-activated with ``sock`` as fd 3."""
    with open(log, "wb") as f:
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                _ACTIVATE,
                str(sock.fileno()),
                "-m",
                "wardd.daemon.cli",
                "run",
                "--config",
                str(env.config),
            ],
            pass_fds=(sock.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=child_env(),
            start_new_session=True,
        )


def entry_point_plugin(
    root: Path, module: str, source: str, entries: dict[str, str]
) -> dict[str, str]:
    """A real distribution on disk whose ``wardd.adapters`` entry points are
    ``entries`` (name -> attribute of ``module``, written from ``source``):
    the environment a daemon needs to load it (``PYTHONPATH``, and
    ``WARDD_TEST_ROOT`` for the plugin's own files)."""
    path = root / "plugin"
    dist = path / f"{module}-1.0.dist-info"
    dist.mkdir(parents=True)
    (path / f"{module}.py").write_text(source)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n"
    )
    lines = "".join(f"{name} = {module}:{attr}\n" for name, attr in entries.items())
    (dist / "entry_points.txt").write_text("[wardd.adapters]\n" + lines)
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")])),
        "WARDD_TEST_ROOT": str(root),
    }
