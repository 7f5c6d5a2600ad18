"""The floor of one sequential guarded ``invoke``, per thread (``micro.py floor``).

What a daemon in one CPython process cannot go below, each part measured
alone in a plain loop, as CPU of the thread that would do it (user and
system time from ``getrusage(RUSAGE_THREAD)``):

- the writer: two ``synchronous=FULL`` WAL commits of the pages a dispatch
  writes (7 and 5, docs/performance.md "WAL pages per dispatch commit"),
  one row each: SQLite and the kernel, no Python of ours; then the
  daemon's own two units (``invoke_claim``, ``outcome``) with their commits
  (the engine loop of ``run.py``'s raw section);
- the event loop: one Ed25519 check (libsodium and OpenSSL), and one
  request answered on a Unix socket under trio with the frames of an
  ``invoke`` (~300 bytes in, ~80 out): the read loop, a task per request
  and a thread → loop hop, as the server does, against the bare read and
  write;
- the workers: two thread wake-ups (the dispatch queued, the claim's
  commit answered), measured as a ping-pong between two threads.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import statistics
import struct
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

REPS = 5


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime, r.ru_stime


def _show(label: str, samples: list[tuple[float, float]]) -> None:
    """``samples``: (user, system) seconds per iteration, one per repetition."""
    tot = [u + s for u, s in samples]
    med = statistics.median(tot) * 1e6
    user = statistics.median(u for u, _ in samples) * 1e6
    sys_ = statistics.median(s for _, s in samples) * 1e6
    print(
        f"   {label:<62} {med:8.1f} µs  [{min(tot) * 1e6:.1f}–{max(tot) * 1e6:.1f}]"
        f"  user {user:.0f}, system {sys_:.0f}",
        flush=True,
    )


def _per_iter(fn: Callable[[], Any], n: int) -> list[tuple[float, float]]:
    out = []
    for _ in range(REPS):
        u0, s0 = _cpu()
        for _ in range(n):
            fn()
        u1, s1 = _cpu()
        out.append(((u1 - u0) / n, (s1 - s0) / n))
    return out


# -- the writer -----------------------------------------------------------------------


def raw_commits(root: Path, pages: tuple[int, ...] = (7, 5), n: int = 300) -> None:
    """FULL WAL commits of one row each, as long as ``pages`` pages, in a row."""
    import _raw

    path = _raw.fresh_db(root, "floor.db")
    conn = _raw._connect(path)  # the WAL grown and reused, as the daemon's
    rows = [_raw.row_of(p) for p in pages]

    def pair() -> None:
        for row in rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t(at, data) VALUES (?, ?)", (0.0, row))
            conn.execute("COMMIT")

    try:
        _show(
            f"writer: {len(pages)} FULL WAL commits of {'+'.join(map(str, pages))} pages",
            _per_iter(pair, n),
        )
    finally:
        conn.close()


def engine(root: Path, n: int = 300) -> None:
    """The daemon's claim and outcome units with their commits, in a plain loop."""
    import _engine

    db, actor = _engine.prepare_db(root / "engine", REPS * n)
    out = []
    for r in range(REPS):
        u0, s0 = _cpu()
        _engine.run(db, actor, r * n, n)
        u1, s1 = _cpu()
        out.append(((u1 - u0) / n, (s1 - s0) / n))
    _show("writer: the two units (load, core, apply) and their commits", out)


# -- the event loop ---------------------------------------------------------------------


def verify_floor() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    key = Ed25519PrivateKey.generate()
    msg = os.urandom(260)
    sig = key.sign(msg)
    raw = key.public_key().public_bytes_raw()
    pub = Ed25519PublicKey.from_public_bytes(raw)
    _show(
        "loop: one Ed25519 check, OpenSSL (cryptography)",
        _per_iter(lambda: pub.verify(sig, msg), 2000),
    )
    try:
        from nacl.bindings import crypto_sign_open
    except ImportError:
        print("   loop: one Ed25519 check, libsodium: PyNaCl is not installed")
        return
    _show(
        "loop: one Ed25519 check, libsodium (PyNaCl)",
        _per_iter(lambda: crypto_sign_open(sig + msg, raw), 2000),
    )


def _client(sock: socket.socket, frame: bytes, n: int) -> None:
    """A blocking client: ``n`` requests, one at a time."""
    for _ in range(n):
        sock.sendall(frame)
        need, got = None, b""
        while need is None or len(got) < need:
            got += sock.recv(65536)
            if need is None and len(got) >= 4:
                need = 4 + struct.unpack(">I", got[:4])[0]
    sock.close()


def round_trips(n: int = 3000) -> None:
    """One request read and answered under trio, with and without the
    server's machinery (a task per request, a hop from another thread)."""
    request = struct.pack(">I", 300) + b"r" * 300
    reply = struct.pack(">I", 80) + b"a" * 80
    helper: list[threading.Thread] = []

    async def serve(kind: str, stream: trio.SocketStream) -> tuple[float, float]:
        token = trio.lowlevel.current_trio_token()
        hop = _Hop(token) if kind == "hop" else None
        fd = stream.socket.fileno()
        u0, s0 = _cpu()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                got = b""
                while len(got) < len(request):
                    data = await stream.receive_some(65536)
                    got += data
                if kind == "bare":
                    os.write(fd, reply)
                else:
                    nursery.start_soon(_answer, fd, reply, hop)
        u1, s1 = _cpu()
        if hop is not None:
            hop.stop()
        return (u1 - u0) / n, (s1 - s0) / n

    def one(kind: str) -> tuple[float, float]:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        t = threading.Thread(target=_client, args=(b, request, n))
        helper.append(t)

        async def main() -> tuple[float, float]:
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))
            t.start()
            try:
                return await serve(kind, stream)
            finally:
                t.join()
                await stream.aclose()

        return trio.run(main)

    for kind, label in (
        ("bare", "loop: a request read, a reply written (trio, Unix socket)"),
        ("task", "  the same, the reply from a task of its own"),
        ("hop", "  the same, the task woken from another thread (run_sync_soon)"),
    ):
        _show(label, [one(kind) for _ in range(REPS)])


class _Hop:
    """Another thread that sets trio events through the loop's token, as
    the writer answers a dispatch."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        import queue

        self._q: queue.SimpleQueue[trio.Event | None] = queue.SimpleQueue()
        self._token = token
        self._t = threading.Thread(target=self._run)
        self._t.start()

    def _run(self) -> None:
        while (event := self._q.get()) is not None:
            self._token.run_sync_soon(event.set)

    def send(self, event: trio.Event) -> None:
        self._q.put(event)

    def stop(self) -> None:
        self._q.put(None)
        self._t.join()


async def _answer(fd: int, reply: bytes, hop: _Hop | None) -> None:
    if hop is not None:
        done = trio.Event()
        hop.send(done)
        with trio.CancelScope(shield=True):
            await done.wait()
    os.write(fd, reply)


# -- the workers ---------------------------------------------------------------------------


def wakeups(n: int = 5000) -> None:
    """Two threads handing a turn back and forth through conditions:
    the CPU of one side per round (two wake-ups each way)."""
    cond = threading.Condition()
    turn = [0]
    out: list[tuple[float, float]] = []

    def other() -> None:
        for i in range(REPS * n):
            with cond:
                while turn[0] != 2 * i + 1:
                    cond.wait()
                turn[0] += 1
                cond.notify()

    t = threading.Thread(target=other)
    t.start()
    try:
        i = 0
        for _ in range(REPS):
            u0, s0 = _cpu()
            for _ in range(n):
                with cond:
                    turn[0] += 1
                    cond.notify()
                    while turn[0] != 2 * i + 2:
                        cond.wait()
                i += 1
            u1, s1 = _cpu()
            out.append(((u1 - u0) / n, (s1 - s0) / n))
    finally:
        t.join()
    _show("workers: a round trip of wake-ups between two threads", out)


def bench_floor() -> None:
    print("\n== floor: one sequential invoke's irreducible parts, per thread (CPU)")
    root = Path(tempfile.mkdtemp(prefix="wardd-floor-"))
    try:
        raw_commits(root)
        engine(root)
        verify_floor()
        round_trips()
        wakeups()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    bench_floor()
