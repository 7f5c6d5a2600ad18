"""Micro-benchmarks of the per-request work outside the database: one process, no daemon.

    .venv/bin/python bench/micro.py                 # every section, ~30 s
    .venv/bin/python bench/micro.py decode verify   # some sections

Sections (docs/performance.md, "Where each microsecond goes"):

- ``trio``: the steps of a reply on the event loop (schedule point, cancel
  scopes, lock, ``send_all``);
- ``decode``: `decode_item` of typical request bodies (a signed ``invoke``,
  ``status``, a ``submit`` with 60 KiB of args) and of a hostile 1 MiB body
  of tiny items, against the pure-Python reference decoder and against a
  bare ``cbor2.loads`` (the floor);
- ``hostile``: the worst frame bodies we can build (``_hostile.py``) at the
  largest size decoded on the event loop, at 64 KiB and at 1 MiB: decode
  CPU on the path each takes, and the event loop's lateness beside a
  thread decoding the worst 1 MiB body;
- ``wire``: the rest of the framing on the event loop: ``FrameDecoder``,
  ``parse_request``, ``encode_reply`` of a typical reply;
- ``verify``: Ed25519 signature checks: the parts of `verify` (signing
  input, key parsing, the check itself); whether ``verify`` releases the
  GIL (two threads against one); and, under 16 concurrent trio tasks, the
  event loop's CPU per request with the check inline against on a thread
  (``trio.to_thread.run_sync``);
- ``registration``: a signed request's registration check: a ``SELECT`` on
  the reader against the daemon's set of neurons known to be registered;
- ``log``: structlog as the daemon configures it: a disabled ``debug``, an
  ``info`` line (written to /dev/null);
- ``floor``: one sequential ``invoke``'s irreducible parts, per thread
  (``_floor.py``): two FULL WAL commits of a dispatch's pages, the
  daemon's two units with their commits, one Ed25519 check (libsodium and
  OpenSSL), a request answered on a socket under trio (bare, from a task,
  from a task woken by another thread), two threads' wake-ups.

Figures are CPU time of the calling thread (wall time where it says so), the
median of 5 repetitions [min–max]; the machine is shared, so compare figures
of one run only.
"""

from __future__ import annotations

import math
import os
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import cbor2
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wardd.protocol import (
    FrameDecoder,
    _cbor,
    decode_item,
    encode_frame,
    parse_request,
    sign,
    verify,
)
from wardd.protocol._signing import signing_input

REPS = 7


def per_call(fn: Callable[[], Any], n: int) -> list[float]:
    """CPU seconds of this thread per call of ``fn``, one sample per repetition
    (CPU time, not wall time: a shared machine takes the core away now and then)."""
    out = []
    for _ in range(REPS):
        t = time.thread_time()
        for _ in range(n):
            fn()
        out.append((time.thread_time() - t) / n)
    return out


def show(label: str, samples: list[float], unit: str = "µs", scale: float = 1e6) -> float:
    med = statistics.median(samples) * scale
    print(
        f"   {label:<58} {med:9.2f} {unit}  [{min(samples) * scale:.2f}–"
        f"{max(samples) * scale:.2f}]",
        flush=True,
    )
    return med


def request_bodies() -> dict[str, bytes]:
    key = Ed25519PrivateKey.generate()
    invoke = sign(
        key,
        "bench",
        "invoke",
        {"op": "op-000123", "expected_attempt": 1, "placement_generation": 3, "expected_epoch": 1},
    )
    submit = sign(
        key,
        "bench",
        "submit",
        {"prog": "bench", "op": "op-000124", "act": "echo", "args": b"x" * 60_000},
    )
    return {
        "signed invoke request (%d B)": cbor2.dumps(
            {"id": 17, "method": "invoke", "params": invoke}
        ),
        "status request (%d B)": cbor2.dumps({"id": 18, "method": "status", "params": {}}),
        "signed submit, 60 KiB args (%d B)": cbor2.dumps(
            {"id": 19, "method": "submit", "params": submit}
        ),
    }


def hostile_body() -> bytes:
    n = (1 << 20) - 5
    return b"\x9a" + n.to_bytes(4, "big") + b"\x01" * n  # an array of 1M tiny integers


def bench_decode() -> None:
    print("\n== decode: one frame body to a value")
    reference = getattr(_cbor, "reference_decode", None)
    for label, body in request_bodies().items():
        label %= len(body)
        n = 200 if len(body) > 10_000 else 5000
        show(f"{label}: decode_item", per_call(lambda b=body: decode_item(b), n))
        if reference is not None:
            show(f"{label}: reference (pure Python)", per_call(lambda b=body: reference(b), n))
        show(f"{label}: bare cbor2.loads (floor)", per_call(lambda b=body: cbor2.loads(b), n))
    body = hostile_body()
    show(
        "hostile 1 MiB array of tiny ints: decode_item",
        per_call(lambda: decode_item(body), 3),
        "ms",
        1e3,
    )
    if reference is not None:
        show(
            "hostile 1 MiB array of tiny ints: reference",
            per_call(lambda: reference(body), 3),
            "ms",
            1e3,
        )
    show(
        "hostile 1 MiB array of tiny ints: bare cbor2.loads",
        per_call(lambda: cbor2.loads(body), 3),
        "ms",
        1e3,
    )
    # why the server decodes large bodies on a thread with the reference decoder
    show(
        "wake-up delay past a 1 ms sleep, beside decode_item of it",
        wake_delays(lambda: decode_item(body)),
        "ms",
        1e3,
    )
    if reference is not None:
        show(
            "wake-up delay past a 1 ms sleep, beside the reference",
            wake_delays(lambda: reference(body)),
            "ms",
            1e3,
        )


def bench_hostile() -> None:
    """The worst frames we can build (``_hostile.py``), per size: what each costs
    decode_item (the event loop's path, bodies up to INLINE_DECODE_BYTES) and
    the reference decoder (the thread's path, larger bodies), CPU time."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _hostile

    from wardd.daemon.wire.server import INLINE_DECODE_BYTES
    from wardd.protocol import BadFrame

    print(
        "\n== hostile: the worst frame bodies, by shape and size"
        f" (event loop decodes up to {INLINE_DECODE_BYTES} B)"
    )

    def refused_or(fn: Callable[[bytes], Any], body: bytes) -> Callable[[], Any]:
        def call() -> None:
            try:
                fn(body)
            except BadFrame:
                pass

        return call

    shapes = {"colliding keys (refused)": _hostile.colliding_keys, **_hostile.HOSTILE}
    for size in (INLINE_DECODE_BYTES, 65536, 1 << 20):
        for name, build in shapes.items():
            body = build(size)
            n = 3 if size > 65536 else 20
            if size <= INLINE_DECODE_BYTES:
                show(
                    f"{size // 1024} KiB {name}: decode_item (event loop)",
                    per_call(refused_or(decode_item, body), n),
                    "ms",
                    1e3,
                )
            else:
                show(
                    f"{size // 1024} KiB {name}: reference (thread)",
                    per_call(refused_or(_cbor.reference_decode, body), n),
                    "ms",
                    1e3,
                )
    body = _hostile.nested_empties(1 << 20)
    show(
        "wake-up delay past a 1 ms sleep, beside the reference on 1 MiB of empties",
        wake_delays(refused_or(_cbor.reference_decode, body)),
        "ms",
        1e3,
    )


def bench_wire() -> None:
    print("\n== wire: framing, request shape, reply encoding")
    from wardd.daemon.wire.server import encode_reply

    body = request_bodies()["signed invoke request (%d B)"]
    frame = len(body).to_bytes(4, "big") + body
    dec = FrameDecoder()

    def feed_next() -> None:
        dec.feed(frame)
        dec.next_body()

    show("FrameDecoder.feed + next_body (one whole frame)", per_call(feed_next, 20000))
    item = decode_item(body)
    show("parse_request", per_call(lambda: parse_request(item), 20000))
    from wardd.daemon.dispatch.handlers import METHODS
    from wardd.daemon.wire.params import check_params

    params, spec = item["params"], METHODS["invoke"].params
    show(
        "check_params of the signed invoke (daemon/wire/params.py)",
        per_call(lambda: check_params(spec, params, signed=True), 20000),
    )
    reply = {
        "id": 17,
        "result": {
            "op": "op-000123",
            "attempt": 1,
            "status": "succeeded",
            "result": {"echo": b"x" * 32},
        },
    }
    show("encode_reply of an invoke reply", per_call(lambda: encode_reply(reply, 1 << 20), 20000))
    show("  of which cbor2.dumps alone", per_call(lambda: cbor2.dumps(reply), 20000))
    show(
        "encode_frame (check_value + dumps + header)", per_call(lambda: encode_frame(reply), 20000)
    )


def bench_registration() -> None:
    print("\n== registration: a signed request's last check (contract §4)")
    import tempfile
    from pathlib import Path

    from wardd.daemon.dispatch import management_units as mgmt
    from wardd.daemon.store.reads import Reads
    from wardd.daemon.store.schema import migrate
    from wardd.daemon.store.writer import Tx, connect, connect_reader

    with tempfile.TemporaryDirectory(prefix="wardd-micro-") as tmp:
        db = Path(tmp) / "w.db"
        w = connect(db)
        w.row_factory = sqlite3.Row
        migrate(w)
        ids = [
            Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex() for _ in range(100)
        ]
        for n in ids:
            w.execute("BEGIN")
            mgmt.register_neuron(n)(Tx(w))
            w.execute("COMMIT")
        reads = Reads(connect_reader(db), 1 << 20)
        known = set(ids)
        n = ids[50]
        assert reads.neuron_exists(n)
        show(
            "Reads.neuron_exists (a SELECT on the reader, 100 neurons)",
            per_call(lambda: reads.neuron_exists(n), 20000),
        )
        show("a set of the neurons known to be registered", per_call(lambda: n in known, 20000))


def wake_delays(body: Callable[[], Any] | None) -> list[float]:
    """Per repetition, the median lateness of 1 ms sleeps while ``body`` runs in a loop
    on another thread."""
    out = []
    for _ in range(REPS):
        stop = threading.Event()

        def spin(stop: threading.Event = stop) -> None:
            while not stop.is_set():
                if body is not None:
                    body()
                else:
                    stop.wait(0.01)

        th = threading.Thread(target=spin)
        th.start()
        late = []
        for _ in range(60):
            t = time.perf_counter()
            time.sleep(0.001)
            late.append(time.perf_counter() - t - 0.001)
        stop.set()
        th.join()
        out.append(statistics.median(late))
    return out


def bench_verify() -> None:
    print("\n== verify: Ed25519 signature checks")
    key = Ed25519PrivateKey.generate()
    params = sign(
        key,
        "bench",
        "invoke",
        {"op": "op-000123", "expected_attempt": 1, "placement_generation": 3, "expected_epoch": 1},
    )
    neuron, sig = params["neuron"], params["sig"]
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    msg = signing_input("bench", "invoke", params)
    pub = Ed25519PublicKey.from_public_bytes(bytes.fromhex(neuron))
    show(
        "verify() as the daemon calls it (all of it)",
        per_call(lambda: verify(neuron, sig, "bench", "invoke", params), 2000),
    )
    show(
        "  signing_input (canonical encoding)",
        per_call(lambda: signing_input("bench", "invoke", params), 20000),
    )
    show(
        "  Ed25519PublicKey.from_public_bytes(bytes.fromhex(id))",
        per_call(lambda: Ed25519PublicKey.from_public_bytes(bytes.fromhex(neuron)), 20000),
    )
    show("  key.verify (the check itself, OpenSSL)", per_call(lambda: pub.verify(sig, msg), 2000))
    from wardd.protocol._signing import check_signature

    raw = bytes.fromhex(neuron)
    show(
        "  check_signature (the daemon's: libsodium)",
        per_call(lambda: check_signature(raw, sig, msg), 2000),
    )

    # GIL: the same number of checks on one thread, then split over two
    n = 4000

    def work(k: int) -> None:
        for _ in range(k):
            pub.verify(sig, msg)

    one, two = [], []
    for _ in range(REPS):
        t = time.perf_counter()
        work(n)
        one.append(time.perf_counter() - t)
        ts = [threading.Thread(target=work, args=(n // 2,)) for _ in range(2)]
        t = time.perf_counter()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        two.append(time.perf_counter() - t)
    show(f"{n} checks on one thread", one, "ms", 1e3)
    show(f"{n} checks split over two threads", two, "ms", 1e3)
    print(
        f"   → speed-up with two threads: {statistics.median(one) / statistics.median(two):.2f}×"
        f" (2.00× = the GIL is released for the whole check)"
    )

    # GIL, robust on a loaded machine: how late a thread that sleeps 1 ms wakes
    # while another thread checks signatures in a loop (a thread that holds the
    # GIL makes it wait for the 5 ms switch interval)
    for label, body in (
        ("nothing", None),
        ("key.verify in a loop", lambda: pub.verify(sig, msg)),
        ("a pure-Python loop", lambda: sum(range(1000))),
    ):
        show(f"wake-up delay past a 1 ms sleep, beside {label}", wake_delays(body), "ms", 1e3)

    # 16 concurrent requests on one trio loop: inline; each on a thread beside
    # the loop; or batched, one thread call for every check waiting at that moment
    tasks, per_task = 16, 150
    args = (neuron, sig, "bench", "invoke", params)

    async def run(how: str) -> tuple[float, float]:
        limiter = trio.CapacityLimiter(2)
        send, receive = trio.open_memory_channel[tuple[Any, list[bool]]](math.inf)

        async def batcher() -> None:
            async with receive:
                async for first in receive:
                    batch = [first]
                    while True:
                        try:
                            batch.append(receive.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break

                    def check_all(batch: list[tuple[Any, list[bool]]] = batch) -> None:
                        for _event, box in batch:
                            box.append(verify(*args))

                    await trio.to_thread.run_sync(check_all, limiter=limiter)
                    for event, _box in batch:
                        event.set()

        async def client() -> None:
            for _ in range(per_task):
                if how == "thread":
                    ok = await trio.to_thread.run_sync(verify, *args, limiter=limiter)
                elif how == "batch":
                    event, box = trio.Event(), []
                    send.send_nowait((event, box))
                    await event.wait()
                    ok = box[0]
                else:
                    ok = verify(*args)
                    await trio.lowlevel.checkpoint()
                assert ok

        c0, t0 = time.thread_time(), time.perf_counter()
        async with trio.open_nursery() as outer:
            outer.start_soon(batcher)
            async with trio.open_nursery() as nursery:
                for _ in range(tasks):
                    nursery.start_soon(client)
            await send.aclose()
        return time.thread_time() - c0, time.perf_counter() - t0

    for how, label in (
        ("inline", "inline on the loop"),
        ("thread", "each on a thread (to_thread, 2 at once)"),
        ("batch", "batched: one to_thread call per batch"),
    ):
        loop_cpu, wall = [], []
        for _ in range(REPS):
            c, w = trio.run(run, how)
            loop_cpu.append(c / (tasks * per_task))
            wall.append(w / (tasks * per_task))
        show(f"16 tasks, verify {label}: loop CPU per request", loop_cpu)
        show(f"16 tasks, verify {label}: wall per request", wall)


def bench_log() -> None:
    print("\n== log: structlog as the daemon configures it (level info, lines to /dev/null)")
    import structlog

    from wardd.daemon.observe.logs import configure_logging

    configure_logging("info")
    proxy = structlog.get_logger("wardd.bench")  # what the modules hold
    bound = structlog.get_logger("wardd.bench").bind()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        d1 = per_call(
            lambda: proxy.debug("prepared", neuron="n", op="o", attempt=1, worker="w"), 50000
        )
        d2 = per_call(
            lambda: bound.debug("prepared", neuron="n", op="o", attempt=1, worker="w"), 50000
        )
        i1 = per_call(
            lambda: proxy.info(
                "outcome", neuron="n" * 64, op="op-1", attempt=1, worker="w0", status="succeeded"
            ),
            20000,
        )
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)
    show("debug, disabled, through the module's lazy proxy", d1)
    show("debug, disabled, on a bound logger", d2)
    show("info line (timestamp, JSON, one write to /dev/null)", i1)


def bench_trio() -> None:
    print("\n== trio: what the server's per-request steps cost on the event loop")
    n = 20000

    async def measure(step: Callable[[], Any]) -> float:
        t = time.thread_time()
        for _ in range(n):
            await step()
        return (time.thread_time() - t) / n

    async def nothing() -> None:
        return None

    async def checkpoint() -> None:
        await trio.lowlevel.checkpoint()

    async def two_scopes() -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            pass

    async def one_scope() -> None:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
            pass

    lock = trio.Lock()

    async def locked() -> None:
        async with lock:
            pass

    a, b = trio.socket.socketpair()
    sink = b.detach()

    async def send_all_small() -> None:
        await stream.send_all(b"x" * 120)

    def drain() -> None:
        import socket as stdlib_socket

        s = stdlib_socket.socket(fileno=sink)
        s.setblocking(False)
        try:
            while s.recv(1 << 20):
                pass
        except BlockingIOError:
            pass
        finally:
            s.detach()

    async def send_all_then_drain() -> None:
        await send_all_small()
        if stream_count[0] % 50 == 0:
            drain()
        stream_count[0] += 1

    stream = trio.SocketStream(a)
    stream_count = [1]

    async def main() -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for label, step in (
            ("an await that does not yield", nothing),
            ("a schedule point (trio.lowlevel.checkpoint)", checkpoint),
            ("CancelScope(shield) + move_on_after, as server._run", two_scopes),
            ("one CancelScope(shield, deadline)", one_scope),
            ("async with trio.Lock() (uncontended)", locked),
            ("SocketStream.send_all of 120 bytes", send_all_then_drain),
        ):
            out[label] = [await measure(step) for _ in range(REPS)]
        return out

    for label, samples in trio.run(main).items():
        show(label, samples)
    drain()
    os.close(sink)
    a.detach()


def bench_floor() -> None:
    from _floor import bench_floor as floor

    floor()


SECTIONS = {
    "trio": bench_trio,
    "decode": bench_decode,
    "hostile": bench_hostile,
    "wire": bench_wire,
    "verify": bench_verify,
    "registration": bench_registration,
    "log": bench_log,
    "floor": bench_floor,
}


def main(argv: list[str]) -> int:
    names = argv or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:  # --help included: the usage is the module's docstring
        print(__doc__, file=sys.stderr)
        if set(unknown) - {"--help", "-h"}:
            print(
                f"micro.py: no section {', '.join(unknown)}; sections: {', '.join(SECTIONS)}",
                file=sys.stderr,
            )
            return 2
        return 0
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; load "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; cbor2 "
        f"{_version('cbor2')}, cryptography {_version('cryptography')}, structlog "
        f"{_version('structlog')}; Python {sys.version.split()[0]}"
    )
    for name in names:
        SECTIONS[name]()
    print(f"# load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
