"""Real wardd daemon processes for the benchmarks, and signed set-up calls.

A daemon is ``python -m wardd.daemon.cli run --config X`` in its own session,
with a temp dir for its config, socket, database and log; readiness is its
own ``READY=1`` on a notify datagram socket bound here (like
``tests/daemon/harness.py``), never a sleep. ``stop`` sends SIGTERM and waits;
``cleanup`` kills whatever is left of the process group. Only the local
Unix sockets of the temp dir are used.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from wardd.client import Client, Neuron

NETWORK = "bench"
START_TIMEOUT = 120.0


class Daemon:
    """One daemon on one temp dir; restartable (a new boot each start)."""

    def __init__(
        self,
        root: Path,
        *,
        workers: int = 2,
        database: Path | None = None,
        log_to: str = "file",
        command: list[str] | None = None,
        **top: Any,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.socket = root / "s.sock"
        self.database = database or root / "wardd.db"
        self.config = root / "wardd.toml"
        self.log_to = log_to
        # what runs ``wardd`` (its arguments follow): cpu_profile.py puts cProfile in front
        self.command = command or [sys.executable, "-m", "wardd.daemon.cli"]
        settings = {
            "network": NETWORK,
            "socket": str(self.socket),
            "database": str(self.database),
            "workers": workers,
            "shutdown_grace_s": 5,
            **top,
        }
        self.config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.ready_s: float | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Daemon:
        """Spawn and wait for READY=1; ``ready_s`` is the time from just
        before the spawn to the datagram."""
        self.starts += 1
        notify = self.root / f"notify-{self.starts}"
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(str(notify))
        ns.settimeout(START_TIMEOUT)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("NOTIFY_", "LISTEN_", "WATCHDOG_"))
        }
        env["NOTIFY_SOCKET"] = str(notify)
        out = (
            open(self.root / f"daemon-{self.starts}.log", "wb")
            if self.log_to == "file"
            else open(os.devnull, "wb")
        )
        try:
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(
                [*self.command, "run", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            while True:
                try:
                    msg = ns.recv(4096).decode()
                except TimeoutError:
                    self.cleanup()
                    raise RuntimeError(
                        f"wardd sent no READY=1 within {START_TIMEOUT}s:\n" + self.log_tail()
                    ) from None
                if "READY=1" in msg.split("\n"):
                    self.ready_s = time.perf_counter() - t0
                    break
        finally:
            ns.close()
            out.close()
            try:
                notify.unlink()
            except FileNotFoundError:
                pass
        return self

    def connect(self, timeout: float | None = 60.0) -> Client:
        return Client(str(self.socket), timeout=timeout, client_name="wardd-bench")

    def log_tail(self, n: int = 30) -> str:
        p = self.root / f"daemon-{self.starts}.log"
        if not p.exists():
            return ""
        return "\n".join(p.read_text(errors="replace").splitlines()[-n:])

    def log_lines(self) -> list[dict[str, Any]]:
        p = self.root / f"daemon-{self.starts}.log"
        out = []
        for line in p.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.cleanup()
            return None

    def cleanup(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the daemon's own session only
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()


class Actor:
    """A registered neuron with one prog granted ``echo``, bound to a worker."""

    def __init__(self, client: Client, *, worker: str = "w0", prog: str = "bench") -> None:
        self.neuron = Neuron.generate()
        self.id = self.neuron.id
        self.prog = prog
        self.worker = worker
        self.call(client, "register_neuron", {})
        self.call(client, "create_prog", {"prog": prog, "step_limit": 10**9})
        root = client.call("get_neuron", {"neuron": self.id})
        self.call(
            client,
            "set_grant",
            {
                "prog": prog,
                "acts": ["echo"],
                "enabled": True,
                "expected_policy_version": root["policy_version"],
            },
        )
        self.bind(client)

    def sign(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return self.neuron.sign(method, params, NETWORK)

    def call(self, client: Client, method: str, params: dict[str, Any]) -> Any:
        return client.call(method, self.sign(method, params))

    def bind(self, client: Client) -> None:
        """Bind this boot's descriptor of ``self.worker`` (needed after each restart)."""
        desc = next(
            w["descriptor"]
            for w in client.call("list_workers")["workers"]
            if w["worker"] == self.worker
        )
        root = client.call("get_neuron", {"neuron": self.id})
        self.call(
            client,
            "bind_placement",
            {"expected_generation": root["placement_generation"], "descriptor": desc},
        )
        root = client.call("get_neuron", {"neuron": self.id})
        self.generation = root["placement_generation"]
        self.epoch = root["epoch"]

    def submit_params(self, op: str, args: bytes = b"x" * 32) -> dict[str, Any]:
        return self.sign("submit", {"prog": self.prog, "op": op, "act": "echo", "args": args})

    def call_params(self, op: str, args: bytes = b"x" * 32) -> dict[str, Any]:
        """Pre-signed ``call`` of a new op (``expected_epoch`` sent, as a session
        that pins its epoch sends it; the daemon takes the current generation)."""
        return self.sign(
            "call",
            {
                "prog": self.prog,
                "op": op,
                "act": "echo",
                "args": args,
                "expected_epoch": self.epoch,
            },
        )

    def invoke_params(self, op: str) -> dict[str, Any]:
        """Pre-signed ``invoke`` of attempt 1 (valid until the placement or epoch changes)."""
        return self.sign(
            "invoke",
            {
                "op": op,
                "expected_attempt": 1,
                "placement_generation": self.generation,
                "expected_epoch": self.epoch,
            },
        )
