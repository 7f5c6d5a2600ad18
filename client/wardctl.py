"""wardctl: the operator's command line for wardd (contract §1, §4).

When the answer to a request is lost (the connection closed, a timeout, an
interrupt), wardctl says that the request may have been applied, and for
`invoke` that the attempt may have run and how to look (`wardctl op show
OP`): it never guesses. A key file that others can read or write is
refused, as ssh refuses one.

The exit status tells a script what happened (`Exit`, also in ``--help``
and docs/operations.md): 0 done; 1 refused by the daemon (``error: <code>:
<message>`` on stderr, nothing was done); 2 usage (the command line, or a
key or file it names, cannot be used); 3 the attempt's fate is unknown,
the answer to a write was lost after it was sent, or an `invoke` or `call`
was answered with an error that can come after the claim (it may have run); 4 the
act failed (definite: no effect); 69 the daemon cannot be reached; 130
interrupted.
"""

from __future__ import annotations

import argparse
import enum
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from wardd.protocol import (
    ATTEMPT_LIST_STATES,
    MAX_PAGE_LIMIT,
    OpState,
    Pager,
    PagingError,
    ProgState,
    WarddError,
    is_id,
)

from ._doubt import PRUNED_TEXT, discarded, refusal_in_doubt
from ._errors import (
    ClientError,
    ConnectionClosed,
    DaemonUnreachable,
    KeyFileError,
    MayHaveRun,
    RemoteProtocolError,
)
from ._neuron import Neuron
from ._paths import key_path as env_key_path
from ._paths import socket_path as env_socket_path
from ._render import duration, human_size, scalar, tree, write_json
from ._session import NO_VALUE
from ._sync import Client
from ._sync_session import Session

__all__ = ["Exit", "build_parser", "main"]


class Exit(enum.IntEnum):
    """wardctl's exit statuses: what a script may conclude from each."""

    DONE = 0
    """The command did what it says."""
    REFUSED = 1
    """The daemon refused the request (its code is printed): nothing was done."""
    USAGE = 2
    """The command line, or a key or file it names, cannot be used: nothing was sent."""
    MAY_HAVE_RUN = 3
    """The attempt's fate is unknown, a write's answer was lost after it was sent, or an
    invoke or call was answered with an error that can come after the claim (``internal``)."""
    FAILED = 4
    """The act failed: a definite outcome without effect (the op may be invoked again)."""
    UNREACHABLE = 69
    """The daemon cannot be reached (EX_UNAVAILABLE): nothing was sent."""
    INTERRUPTED = 130
    """Interrupted (SIGINT): what was in flight is said on stderr."""


_EXIT_TEXT = {
    Exit.DONE: "done",
    Exit.REFUSED: "refused by the daemon (the code is printed)",
    Exit.USAGE: "usage (the command line, or a key or file it names)",
    Exit.MAY_HAVE_RUN: "the attempt's fate is unknown, the answer was lost after "
    "sending, or an invoke or call was answered with an error that can come after the "
    "claim (it may have run)",
    Exit.FAILED: "the act failed (definite, no effect)",
    Exit.UNREACHABLE: "the daemon cannot be reached",
    Exit.INTERRUPTED: "interrupted",
}
EXIT_STATUS_HELP = "exit status:\n" + "\n".join(
    f"  {int(code):<4} {text}" for code, text in _EXIT_TEXT.items()
)
SHELLS = ("bash", "zsh", "fish")

# plain strings, so that argparse's messages show the words, not enum reprs
PROG_STATES = tuple(s.value for s in ProgState)
OP_STATES = tuple(s.value for s in OpState)
ATTEMPTS_LISTED = tuple(s.value for s in ATTEMPT_LIST_STATES)
DEFAULT_STEP_LIMIT = 1_000_000
# Reads are bounded by default. Writes wait without limit unless --timeout
# says otherwise: they may legitimately take long (`invoke` runs an adapter;
# guarded writes wait for the neuron's adapter calls in progress, contract §3.1;
# `reconcile` and `receipts` wait for receipt checks), and a write that
# timed out leaves the operator unsure whether it was applied.
DEFAULT_READ_TIMEOUT = 30.0


class _Failed(Exception):
    """A command that cannot go on; the message is printed after ``error: ``."""

    status = Exit.USAGE


class _Unreachable(_Failed):
    """The daemon's socket could not be connected to, or it did not answer hello."""

    status = Exit.UNREACHABLE


# --------------------------------------------------------------------------------
# the parser


def _common_options(defaults: bool) -> argparse.ArgumentParser:
    """Global options, accepted before and after the command.

    After the command their default is SUPPRESS, so an option given before
    it is not overwritten by the subcommand's default.
    """
    parser = argparse.ArgumentParser(add_help=False)
    unset: Any = None if defaults else argparse.SUPPRESS
    parser.add_argument(
        "--socket",
        metavar="PATH",
        default=unset,
        help="daemon socket (default: $WARDD_SOCKET or $XDG_RUNTIME_DIR/wardd/wardd.sock)",
    )
    parser.add_argument(
        "--key",
        metavar="PATH",
        default=unset,
        help="neuron key file (default: $WARDD_KEY or $XDG_CONFIG_HOME/wardd/neuron.key)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if defaults else argparse.SUPPRESS,
        help='print the result as JSON (byte strings as {"hex": ...})',
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive_seconds,
        default=unset,
        help=f"wait at most this long for each reply (default: {DEFAULT_READ_TIMEOUT:g} "
        "for reads; no limit for writes, which may wait for adapter calls)",
    )
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wardd")
    except PackageNotFoundError:
        return "unknown"


def _positive_seconds(text: str) -> float:
    """A finite number of seconds above 0 (argparse reports the error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The whole `wardctl` command line: the global options, then every
    command of :data:`_COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="wardctl",
        description="Operate a wardd daemon: inspect it, and sign requests as a neuron.",
        epilog=EXIT_STATUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common_options(True)],
    )
    parser.add_argument("--version", action="version", version=f"wardctl {_version()}")
    _add_commands(parser, "command", _COMMANDS, _common_options(False))
    return parser


@attrs.frozen
class _Arg:
    """One argument of a command: ``add_argument(*flags, **options)``."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]


def _arg(*flags: str, **options: Any) -> _Arg:
    return _Arg(flags, options)


@attrs.frozen
class _OneOf:
    """Arguments of which at most one may be given (a mutually exclusive group)."""

    args: tuple[_Arg, ...]


def _one_of(*args: _Arg) -> _OneOf:
    return _OneOf(args)


@attrs.frozen
class _Command:
    """One command of the table: its parser, its handler and its sub-commands."""

    name: str
    handler: Callable[[_Context], int]
    help: str
    description: str | None
    args: tuple[_Arg | _OneOf, ...] = ()
    read: bool = False  # a read: bounded by the default read timeout
    epilog: str | None = None
    subs: tuple[_Command, ...] = ()


def _command(
    name: str, handler: Callable[[_Context], int], help: str, *args: _Arg | _OneOf, **kw: Any
) -> _Command:
    """A command of wardctl itself: its description is its help unless given."""
    return _Command(name, handler, help, kw.pop("description", help), args, **kw)


def _sub_command(
    name: str, handler: Callable[[_Context], int], help: str, *args: _Arg | _OneOf, **kw: Any
) -> _Command:
    """A command of a group (``prog create``): no description unless given."""
    return _Command(name, handler, help, kw.pop("description", None), args, **kw)


def _add_commands(
    parser: argparse.ArgumentParser,
    dest: str,
    commands: Sequence[_Command],
    common: argparse.ArgumentParser,
) -> None:
    """Add ``commands`` as sub-commands of ``parser`` (the one chosen is in ``dest``)."""
    subparsers = parser.add_subparsers(dest=dest, metavar="COMMAND", required=True)
    for cmd in commands:
        sub = subparsers.add_parser(
            cmd.name,
            parents=[common],
            help=cmd.help,
            description=cmd.description,
            epilog=cmd.epilog,
        )
        sub.set_defaults(handler=cmd.handler, parser=sub, read_only=cmd.read)
        for arg in cmd.args:
            if isinstance(arg, _OneOf):
                group = sub.add_mutually_exclusive_group()
                for one in arg.args:
                    group.add_argument(*one.flags, **one.options)
            else:
                sub.add_argument(*arg.flags, **arg.options)
        if cmd.subs:
            _add_commands(sub, f"{cmd.name}_command", cmd.subs, common)


def _positive_count(text: str) -> int:
    """A whole number above 0 (argparse reports the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _an_id(text: str) -> str:
    """An op id, prog or act tag as the daemon takes them: checked here, so that a
    bad one is a usage error (2) before anything is sent (argparse reports it)."""
    if not is_id(text):
        shown = text if len(text) <= 64 else text[:64] + "..."
        raise argparse.ArgumentTypeError(
            f"{shown!r} is not an id: ids are 1-128 characters of [A-Za-z0-9._:-]"
        )
    return text


# --------------------------------------------------------------------------------
# running a command


class _Context:
    """What a command handler needs: its arguments, and the lazily opened parts."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.json: bool = args.json
        self._client: Client | None = None
        self._neuron: Neuron | None = None
        self._session: Session | None = None
        self.in_flight: str | None = None  # what a lost answer leaves in doubt, said then

    @property
    def key_path(self) -> str:
        return self.args.key or env_key_path()

    @property
    def socket_path(self) -> str:
        return self.args.socket or env_socket_path()

    def client(self) -> Client:
        if self._client is None:
            timeout = self.args.timeout
            if timeout is None and self.args.read_only:
                timeout = DEFAULT_READ_TIMEOUT
            try:
                self._client = Client(self.socket_path, timeout=timeout, client_name="wardctl")
            except (OSError, ConnectionClosed) as exc:  # DaemonUnreachable is an OSError
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                if isinstance(exc, DaemonUnreachable):
                    why = exc.reason
                raise _Unreachable(
                    f"cannot reach wardd at {self.socket_path}: {why}. Is the daemon running "
                    "(make run, or systemctl --user status wardd)? Another socket: --socket "
                    "PATH or $WARDD_SOCKET"
                ) from exc
        if not self.args.read_only and self.in_flight is None:
            self.in_flight = "the request may have been applied: read the state back"
        return self._client

    def neuron(self) -> Neuron:
        if self._neuron is None:
            _refuse_open_key(self.key_path)
            self._neuron = Neuron.load(self.key_path)
        return self._neuron

    def neuron_id(self) -> str:
        """The neuron whose records a read is about: --neuron, else the key's."""
        explicit = getattr(self.args, "neuron", None)
        return explicit.lower() if explicit else self.neuron().id

    def session(self) -> Session:
        if self._session is None:
            neuron = self.neuron()  # a bad key fails before the daemon is contacted
            self._session = Session(self.client(), neuron)
        return self._session

    def read(self, method: str, **params: Any) -> Any:
        return self.client().call(method, params)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run wardctl with `argv` (default: the process's); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0), or a usage error (2)
        return exc.code if isinstance(exc.code, int) else Exit.USAGE
    ctx = _Context(args)
    try:
        return int(args.handler(ctx))
    except SystemExit as exc:  # parser.error() from a handler
        return exc.code if isinstance(exc.code, int) else Exit.USAGE
    except WarddError as exc:
        return _report_refusal(ctx, exc)
    except MayHaveRun as exc:  # an answer after the claim, or a timeout after sending
        return _report_doubt(ctx, exc)
    except TimeoutError:
        doubt = ctx.in_flight or "the request may still be applied: read it back"
        return _report(ctx, f"timed out waiting for wardd; {doubt}", _lost_status(ctx))
    except (ConnectionClosed, RemoteProtocolError) as exc:
        said = str(exc)
        if ctx.in_flight and "may have" not in said:  # the session may have said it already
            said = f"{said}; {ctx.in_flight}"
        return _report(ctx, said, _lost_status(ctx))
    except _Failed as exc:
        return _report(ctx, str(exc), exc.status)
    except (KeyFileError, ClientError) as exc:
        return _report(ctx, str(exc), Exit.USAGE)
    except FileExistsError as exc:
        return _report(ctx, f"{exc.args[0] if exc.args else exc}", Exit.USAGE)
    except KeyboardInterrupt:
        doubt = f": {ctx.in_flight}" if ctx.in_flight else ""
        print(f"wardctl: interrupted{doubt}", file=sys.stderr)
        return Exit.INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (`wardctl ops | head`): say
        # nothing more, and keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return Exit.REFUSED
    finally:
        ctx.close()


def _lost_status(ctx: _Context) -> Exit:
    """A lost or timed-out answer: a write may have been applied (3); a read
    changes nothing, so the daemon was simply not reachable in time (69)."""
    return Exit.MAY_HAVE_RUN if ctx.in_flight else Exit.UNREACHABLE


def _report(ctx: _Context, message: str, status: Exit) -> int:
    if ctx.json:
        write_json({"error": {"message": message}})
    print(f"error: {message}", file=sys.stderr)
    return status


def _report_doubt(ctx: _Context, exc: MayHaveRun) -> int:
    """A dispatch whose attempt may have run (contract §4, `AFTER_CLAIM_CODES`):
    never reported as a refusal."""
    if ctx.json:
        answer = exc.answer.to_wire() if isinstance(exc.answer, WarddError) else {}
        write_json({"error": {**answer, "message": str(exc), "op": exc.op, "attempt": exc.attempt}})
    print(f"error: {exc}", file=sys.stderr)
    return Exit.MAY_HAVE_RUN


def _report_refusal(ctx: _Context, exc: WarddError) -> int:
    if ctx.json:
        write_json({"error": exc.to_wire()})
    print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
    if exc.data:
        for key, value in exc.data.items():
            print(f"  {key}: {scalar(value)}", file=sys.stderr)
    if exc.code == "unknown_neuron" and not getattr(ctx.args, "neuron", None):
        # the neuron asked about is the key's: say which key, and what registers it
        print(
            f"  key file: {ctx.key_path}\n"
            "hint: register this key's neuron with `wardctl register` (or name another "
            "key: --key PATH or $WARDD_KEY)",
            file=sys.stderr,
        )
    return Exit.REFUSED


def _out(ctx: _Context, result: Any, text: str | Sequence[str]) -> int:
    """Print `result` as JSON with --json, else the readable `text`."""
    if ctx.json:
        write_json(result)
    else:
        print(text if isinstance(text, str) else "\n".join(text))
    return 0


def _missing_sub(ctx: _Context) -> int:  # pragma: no cover - argparse requires one
    ctx.args.parser.error("a command is required")
    return 2


def _already(result: Mapping[str, Any]) -> str:
    return " (already)" if result.get("already") else ""


# --------------------------------------------------------------------------------
# commands: local, and unsigned reads


def _refuse_open_key(path: str) -> None:
    """Refuse a key file that others may read or write (mode & 077), as ssh does."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # Neuron.load says what is wrong with it
    if mode & 0o077:
        raise _Failed(
            f"key file {path} is accessible by others (mode {stat.S_IMODE(mode):04o}): "
            f"it signs as your neuron; run chmod 600 {path}"
        )


def _keygen(ctx: _Context) -> int:
    path = ctx.key_path
    if os.path.lexists(path) and not ctx.args.force:
        raise _Failed(f"key file {path} already exists (use --force to replace it)")
    neuron = Neuron.generate()
    neuron.save(path, overwrite=ctx.args.force)
    lines = [f"key file: {os.path.abspath(path)} (mode 0600: keep it private)", neuron.id]
    return _out(ctx, {"neuron": neuron.id, "path": path}, lines)


def _status(ctx: _Context) -> int:
    status = ctx.read("status")
    return _out(ctx, status, _status_lines(status))


def _metrics(ctx: _Context) -> int:
    got = ctx.read("metrics")
    if ctx.json:
        write_json(got)
    else:
        sys.stdout.write(got["text"])
    return 0


def _status_lines(s: Mapping[str, Any]) -> list[str]:
    lines = [f"wardd {s.get('version', '?')} (protocol {s.get('protocol', '?')})"]
    lines.append(f"boot:        {s.get('boot', '?')}")
    lines.append(f"network:     {s.get('network', '?')}")
    uptime = s.get("uptime")
    up = f" (up {duration(uptime)})" if isinstance(uptime, (int, float)) else ""
    lines.append(f"started:     {s.get('started_at', '?')}{up}")
    db = s.get("db") or {}
    size = db.get("size")
    size_text = human_size(size) if isinstance(size, int) else "?"
    lines.append(
        f"database:    {db.get('path', '?')} (schema {db.get('schema_version', '?')}, {size_text})"
    )
    lines.append("workers:")
    for w in s.get("workers") or []:
        counts = w.get("counts") or {}
        busy = w.get("busy_op")
        doing = (
            f"busy: {_short(busy.get('neuron'))}/{busy.get('op')} attempt {busy.get('attempt')}"
            if busy
            else "idle"
        )
        tally = "  ".join(f"{k} {counts.get(k, 0)}" for k in ("succeeded", "failed", "unknown"))
        lines.append(
            f"  {w.get('id', '?'):<4} {doing:<40} {tally}  digest {_short(w.get('digest'))}"
        )
    ops = s.get("operations") or {}
    by_state = ", ".join(f"{k} {v}" for k, v in ops.items() if v) or "none"
    lines.append(f"operations:  {by_state}")
    lines.extend(_recovery_lines(s))
    lines.append(f"unknown attempts: {s.get('unknown_attempts', '?')}")
    lines.append(f"receipts pending: {s.get('receipts_pending', '?')}")
    writer = s.get("writer") or {}
    mean = writer.get("mean_batch")
    mean_text = f"{mean:.2f}" if isinstance(mean, (int, float)) else "?"
    lines.append(
        f"writer:      backlog {writer.get('backlog', '?')}, batches {writer.get('batches', '?')}, "
        f"mean batch {mean_text}, max batch {writer.get('max_batch', '?')}"
    )
    lines.append(f"connections: {s.get('connections', '?')}")
    return lines


def _recovery_lines(s: Mapping[str, Any]) -> list[str]:
    """The previous boot and this start's recovery, in one line (contract §3.8)."""
    prev = s.get("previous_boot")
    if not isinstance(prev, Mapping):
        return ["previous boot: none (a new database)"] if "previous_boot" in s else []
    rec = s.get("recovery") or {}
    marked, resolved = rec.get("marked_unknown", 0), rec.get("resolved_by_receipt", 0)
    if prev.get("clean"):
        head = f"previous boot {_short(prev.get('boot'))} stopped cleanly"
    else:
        head = f"previous boot {_short(prev.get('boot'))} did not stop cleanly"
    if not marked:
        return [f"{head}: no attempt marked unknown"]
    noun = "attempt" if marked == 1 else "attempts"
    text = f"{head}: {marked} {noun} marked unknown, {resolved} resolved by receipt"
    unknown = s.get("unknown_attempts")
    if isinstance(unknown, int) and unknown:
        text += f", {unknown} wait for you: wardctl attempts --state unknown"
    return [text]


def _short(value: Any, n: int = 12) -> str:
    return str(value)[:n] if value else "-"


def _workers(ctx: _Context) -> int:
    workers = ctx.read("list_workers")["workers"]
    lines = []
    for w in workers:
        d = w.get("descriptor") or {}
        executor = d.get("executor") or {}
        acts = ", ".join(d.get("acts") or []) or "-"
        lines.append(
            f"{w.get('worker')}  boot {_short(executor.get('boot'))}  "
            f"digest {w.get('digest')}\n    acts: {acts}  (max args {d.get('max_arg_bytes')} B)"
        )
    return _out(ctx, workers, lines or ["no workers"])


def _neuron(ctx: _Context) -> int:
    root = ctx.read("get_neuron", neuron=ctx.neuron_id())
    return _out(ctx, root, tree(root))


def _prog_show(ctx: _Context) -> int:
    prog = ctx.read("get_prog", neuron=ctx.neuron_id(), prog=ctx.args.prog)
    return _out(ctx, prog, tree(prog))


def _op_show(ctx: _Context) -> int:
    op = ctx.read("get_operation", neuron=ctx.neuron_id(), op=ctx.args.op)
    if op.get("pruned"):  # retention: only the tombstone is left
        head = (
            f"op {op.get('op')}: {op.get('state')}, pruned at {op.get('pruned_at')}"
            f" (ended at {op.get('ended_at')}); its args, attempts and records are gone,"
            " and the op can never run again"
        )
        return _out(ctx, op, [head, *tree(op)])
    return _out(ctx, op, [*_receipt_conflicts(op.get("attempts") or []), *tree(op)])


def _receipt_conflicts(attempts: list[Any]) -> list[str]:
    """A line for each attempt whose receipt contradicted the outcome recorded
    before it came (``evidence.receipt_conflict``, contract §3.4)."""
    lines = []
    for a in attempts:
        evidence = a.get("evidence") if isinstance(a, Mapping) else None
        conflict = evidence.get("receipt_conflict") if isinstance(evidence, Mapping) else None
        if not isinstance(conflict, Mapping):
            continue
        out = a.get("outcome")
        out = out if isinstance(out, Mapping) else {}
        lines.append(
            f"attempt {a.get('attempt')}: its receipt answered {conflict.get('answer')} "
            f"after {out.get('status')} was recorded (source {out.get('source')}); "
            "look the effect up where the act has it"
        )
    return lines


class _Listing:
    """The items of a paged read, up to ``--limit``; `more` says some were left out."""

    def __init__(self, items: list[Any], more: bool, last_page: Mapping[str, Any]) -> None:
        self.items = items
        self.more = more
        self.last_page = last_page

    def footer(self, noun: str) -> list[str]:
        if not self.more:
            return []
        return [f"(the first {len(self.items)} {noun} shown, more exist: raise --limit)"]


def _pages(ctx: _Context, method: str, key: str, **params: Any) -> list[Any]:
    """Every item of a paged read."""
    return _listing(ctx, method, key, None, **params).items


def _listing(ctx: _Context, method: str, key: str, limit: int | None, **params: Any) -> _Listing:
    """The first `limit` items of a paged read (None: all); pages stop once they are in."""
    pager = Pager(params, key, limit=min(limit or MAX_PAGE_LIMIT, MAX_PAGE_LIMIT))
    page: Any = {}
    while not pager.done and (limit is None or len(pager.items) < limit):
        page = ctx.client().call(method, pager.request())
        try:
            pager.feed(page)
        except PagingError as exc:
            raise RemoteProtocolError(f"{method}: {exc}") from exc
    items = pager.items if limit is None else pager.items[:limit]
    more = len(items) < len(pager.items) or not pager.done
    return _Listing(items, more, page if isinstance(page, Mapping) else {})


def _ops(ctx: _Context) -> int:
    params: dict[str, Any] = {"neuron": ctx.neuron_id()}
    if ctx.args.state:
        params["state"] = ctx.args.state
    if ctx.args.prog:
        params["prog"] = ctx.args.prog
    listing = _listing(ctx, "list_operations", "operations", ctx.args.limit, **params)
    ops = listing.items
    if ctx.args.state == "unknown":
        return _unknown_ops(ctx, params["neuron"], listing)
    lines = [
        f"{o.get('op')}  prog {o.get('prog')}  act {o.get('act')}  {o.get('state')}  "
        f"attempts {o.get('attempts')}" + ("  (pruned)" if o.get("pruned") else "")
        for o in ops
    ]
    return _out(ctx, ops, [*lines, *listing.footer("operations")] or ["no operations"])


def _unknown_ops(ctx: _Context, neuron: str, listing: _Listing) -> int:
    """Each op with an unknown attempt, and that attempt's evidence (contract §3.6)."""
    full = [ctx.read("get_operation", neuron=neuron, op=o["op"]) for o in listing.items]
    if ctx.json:
        write_json(full)
        return 0
    lines: list[str] = []
    for op in full:
        lines.append(
            f"{op.get('op')}  prog {op.get('prog')}  act {op.get('act')}  {op.get('state')}"
        )
        for a in op.get("attempts") or []:
            if a.get("state") != "unknown":
                continue
            lines.append(
                f"  attempt {a.get('attempt')} ({a.get('kind')}): unknown, "
                f"claimed {scalar(a.get('claimed'))}, boot {_short(a.get('boot'))}"
            )
            evidence = a.get("evidence")
            if evidence:
                lines.append("    evidence:")
                lines.extend(tree(evidence, 3))
    lines.extend(listing.footer("operations"))
    print("\n".join(lines) if lines else "no unknown operations")
    return 0


def _attempts(ctx: _Context) -> int:
    every = ctx.args.watch
    state, limit = ctx.args.state, ctx.args.limit
    if every is None:
        return _attempts_once(ctx, _listing(ctx, "list_attempts", "attempts", limit, state=state))
    if not every > 0:
        ctx.args.parser.error("--watch needs a positive number of seconds")
    while True:  # until a listing comes back empty: that one is printed as such
        if not ctx.json:
            print(f"-- {time.strftime('%Y-%m-%dT%H:%M:%S%z')}", flush=True)
        listing = _listing(ctx, "list_attempts", "attempts", limit, state=state)
        if not listing.items:
            return _out(ctx, [], f"no {state} attempts left")
        _attempts_once(ctx, listing)
        sys.stdout.flush()
        time.sleep(every)  # the operator's refresh interval


def _attempts_once(ctx: _Context, listing: _Listing) -> int:
    attempts = listing.items
    lines: list[str] = []
    for a in attempts:
        lines.append(
            f"{a.get('neuron')}  {a.get('op')} attempt {a.get('attempt')}  "
            f"prog {a.get('prog')}  act {a.get('act')}  {a.get('kind')} {a.get('state')}  "
            f"claimed {scalar(a.get('claimed'))}  boot {_short(a.get('boot'))}"
        )
        if a.get("evidence"):
            lines.append("    evidence:")
            lines.extend(tree(a["evidence"], 3))
    lines.extend(listing.footer("attempts"))
    return _out(ctx, attempts, lines or [f"no {ctx.args.state} attempts"])


def _history(ctx: _Context) -> int:
    op = ctx.args.op
    listing = _listing(ctx, "history", "records", ctx.args.limit, neuron=ctx.neuron_id(), op=op)
    records = listing.items
    if listing.last_page.get("pruned"):  # contract §3.9: only the tombstone is left
        text = (
            f"op {op} was pruned: its records are gone, and it can never run again "
            f"(what is kept: wardctl op show {op})"
        )
        return _out(ctx, records, text)
    lines = []
    for r in records:
        attempt = f" attempt {r['attempt']}" if r.get("attempt") is not None else ""
        lines.append(f"{r.get('seq')}  {r.get('at')}  {r.get('kind')}{attempt}")
        if r.get("data"):
            lines.extend(tree(r["data"], 2))
    return _out(ctx, records, [*lines, *listing.footer("records")] or ["no records"])


# --------------------------------------------------------------------------------
# commands: signed


def _register(ctx: _Context) -> int:
    result = ctx.session().register().to_wire()
    text = (
        f"neuron {result.get('neuron')} registered, epoch {result.get('epoch')}{_already(result)}"
    )
    return _out(ctx, result, text)


def _bind(ctx: _Context) -> int:
    result = ctx.session().bind(ctx.args.worker).to_wire()
    gen = result.get("placement_generation")
    return _out(ctx, result, f"bound to {ctx.args.worker} (placement generation {gen})")


def _release(ctx: _Context) -> int:
    result = ctx.session().release().to_wire()
    gen = result.get("placement_generation")
    return _out(ctx, result, f"placement released (placement generation {gen})")


def _epoch_advance(ctx: _Context) -> int:
    result = ctx.session().advance_epoch().to_wire()
    return _out(ctx, result, f"epoch {result.get('epoch')}")


def _grant(ctx: _Context) -> int:
    args = ctx.args
    if not args.acts and not args.disable:
        args.parser.error("name at least one ACT, or use --disable")
    acts = args.acts if args.acts else None  # --disable alone keeps the current acts
    if acts:
        _warn_about_grant(ctx, args.prog, set(acts))
    result = ctx.session().grant(args.prog, acts, enabled=not args.disable).to_wire()
    granted = ", ".join(sorted(set(args.acts))) if args.acts else "current acts kept"
    state = "disabled" if args.disable else "enabled"
    text = (
        f"grant for {args.prog}: {granted}, {state} (policy version "
        f"{result.get('policy_version')}; voided {result.get('voided', 0)} prepared attempts)"
    )
    return _out(ctx, result, text)


def _warn_about_grant(ctx: _Context, prog: str, acts: set[str]) -> None:
    """A grant replaces the prog's whole act set: say (on stderr, before it
    is signed) which named acts this daemon does not serve, and which
    granted acts the new set drops. A typo is then seen, not silent."""
    served: set[str] = set()
    for w in ctx.read("list_workers").get("workers", []):
        served.update((w.get("descriptor") or {}).get("acts") or [])
    unknown = sorted(acts - served)
    if unknown:
        print(
            f"wardctl: warning: not an act of this daemon: {', '.join(unknown)}",
            file=sys.stderr,
        )
    try:
        current = ctx.read("get_prog", neuron=ctx.neuron_id(), prog=prog).get("grant") or {}
    except WarddError:
        return  # the grant itself answers (unknown_prog, unknown_neuron)
    dropped = sorted(set(current.get("acts") or []) - acts)
    if dropped:
        print(f"wardctl: note: the grant no longer includes: {', '.join(dropped)}", file=sys.stderr)


def _prog_create(ctx: _Context) -> int:
    if ctx.args.steps < 0:
        ctx.args.parser.error("--steps must be 0 or more")
    result = ctx.session().create_prog(ctx.args.prog, ctx.args.steps).to_wire()
    return _out(ctx, result, f"prog {result.get('prog')} created{_already(result)}")


def _prog_state(ctx: _Context) -> int:
    if ctx.args.expected_version is not None and ctx.args.expected_version < 0:
        ctx.args.parser.error("--expected-version must be 0 or more")
    result = (
        ctx.session()
        .set_prog_state(
            ctx.args.prog,
            ctx.args.state,
            expected_state=ctx.args.expected,
            expected_state_version=ctx.args.expected_version,
        )
        .to_wire()
    )
    version = result.get("state_version")
    shown = "" if version is None else f" (state_version {version})"
    return _out(ctx, result, f"prog {result.get('prog')}: {result.get('state')}{shown}")


def _prog_recover(ctx: _Context) -> int:
    if ctx.args.before is not None and ctx.args.before < 0:
        ctx.args.parser.error("--before must be 0 or more")
    result = ctx.session().recover_reservations(ctx.args.prog, before=ctx.args.before).to_wire()
    return _out(
        ctx, result, f"prog {ctx.args.prog}: {result.get('released')} reservation(s) released"
    )


def _read_args(ctx: _Context) -> bytes:
    a = ctx.args
    if a.args is not None:
        return bytes(a.args.encode("utf-8"))
    if a.args_hex is not None:
        try:
            return bytes.fromhex(a.args_hex)
        except ValueError:
            a.parser.error("--args-hex needs hex digits (0-9, a-f), an even number of them")
    if a.args_file is not None:
        if a.args_file == "-":
            return bytes(sys.stdin.buffer.read())
        try:
            with open(a.args_file, "rb") as f:
                return f.read()
        except OSError as exc:
            raise _Failed(f"cannot read {a.args_file}: {exc.strerror or exc}") from exc
    return b""


_PRUNED = PRUNED_TEXT


def _submit(ctx: _Context) -> int:
    args = _read_args(ctx)
    result = ctx.session().submit(ctx.args.prog, ctx.args.op, ctx.args.act, args).to_wire()
    text = f"op {result.get('op')}: {result.get('state')}{_already(result)}"
    if result.get("pruned"):  # contract §3.9: the tombstone keeps idempotency
        text += f"; {_PRUNED}"
    return _out(ctx, result, text)


def _in_doubt_text(op: str) -> str:
    """What an invoke or call whose answer was lost leaves in doubt: it may have
    been claimed and run, or the daemon may have stopped before the claim."""
    return (
        f"op {op}'s attempt may have run, or may never have started: look with "
        f"`wardctl op show {op}` before anything else (no new attempt there, or one "
        "not_executed: it did not run; one unknown is resolved as docs/recovery.md says)"
    )


def _unknown_text(op: str, attempt: object) -> str:
    """An unknown outcome: what resolves it, with a receipt and without one."""
    return (
        "the outcome is unknown: the act may have had its effect. An act with a "
        "receipt is asked again by `wardctl receipts`; for one without, look at the "
        f"effect and record it: `wardctl reconcile {op} {attempt} --succeeded` (or "
        "--not-executed); docs/recovery.md"
    )


def _invoke(ctx: _Context) -> int:
    op = ctx.args.op
    session = ctx.session()
    ctx.in_flight = _in_doubt_text(op)
    result = session.invoke(op, expected_attempt=ctx.args.attempt).to_wire()
    status = result.get("status")
    lines = [f"op {result.get('op')} attempt {result.get('attempt')}: {status}"]
    if "result" in result:
        lines.extend(tree({"result": result["result"]}))
    if result.get("error") is not None:
        lines.append(f"error: {scalar(result['error'])}")
    if status == "unknown":
        lines.append(_unknown_text(op, result.get("attempt")))
    _out(ctx, result, lines)
    if status == "succeeded":
        return Exit.DONE
    return Exit.FAILED if status == "failed" else Exit.MAY_HAVE_RUN


def _call(ctx: _Context) -> int:
    """`call`: submit and run in one request; exit statuses as `invoke`'s, and
    3 for a refusal that leaves an attempt of the op in doubt (``attempt_unknown``,
    ``attempt_busy``, ``data.may_have_run``) or a pruned op (`wardd.client._doubt`)."""
    a = ctx.args
    args = _read_args(ctx)
    ctx.in_flight = _in_doubt_text(a.op)
    try:
        result = ctx.session().call(a.prog, a.op, a.act, args).to_wire()
    except WarddError as exc:
        if not refusal_in_doubt(exc):
            raise
        _report_refusal(ctx, exc)
        print(
            f"op {a.op} may have run (an attempt of it is unknown or running, or an earlier "
            f"one reached its claim): look with `wardctl op show {a.op}` before anything else",
            file=sys.stderr,
        )
        return Exit.MAY_HAVE_RUN
    status, state = result.get("status"), result.get("state")
    head = f"op {result.get('op')}"
    if result.get("attempt") is not None:
        head += f" attempt {result.get('attempt')}"
    head += f": {status or state}"
    if result.get("already"):
        head += f" (already; the op is {state}: nothing ran again)"
    lines = [head]
    if "result" in result:
        lines.extend(tree({"result": result["result"]}))
    if result.get("error") is not None:
        lines.append(f"error: {scalar(result['error'])}")
    if status == "unknown":
        lines.append(_unknown_text(a.op, result.get("attempt")))
    if discarded(status, state):
        lines.append("it ran; its value was discarded when the op was cancelled")
    if result.get("pruned"):
        lines.append(_PRUNED)
        _out(ctx, result, lines)
        return Exit.MAY_HAVE_RUN
    _out(ctx, result, lines)
    return _call_exit(status, state)


def _call_exit(status: str | None, state: str | None) -> int:
    """A call's exit status: by its attempt's status, else by the op's state
    (a pruned op's is 3: its fate is no longer known)."""
    if status == "succeeded" or (status is None and state == "consumed"):
        return Exit.DONE
    if status in ("failed", "not_executed"):
        return Exit.FAILED
    if status is None:  # cancelled before any attempt reached its claim: nothing ran
        return Exit.REFUSED
    return Exit.MAY_HAVE_RUN  # unknown, or a cancelled op's attempt still running


def _reconcile(ctx: _Context) -> int:
    a = ctx.args
    if a.unclaimed:
        if a.op is not None or a.status is not None or a.value is not None or a.value_hex:
            a.parser.error("--unclaimed takes no OP, ATTEMPT, status or value")
        return _reconcile_unclaimed(ctx)
    if a.dry_run:
        a.parser.error("--dry-run goes with --unclaimed")
    if a.op is None or a.attempt is None or a.status is None:
        a.parser.error(
            "OP, ATTEMPT and one of --succeeded, --failed, --not-executed are required "
            "(or --unclaimed)"
        )
    value: Any = NO_VALUE
    if a.value is not None:
        value = a.value
    elif a.value_hex is not None:
        try:
            value = bytes.fromhex(a.value_hex)
        except ValueError:
            a.parser.error("--value-hex needs hex digits (0-9, a-f), an even number of them")
    result = ctx.session().reconcile(a.op, a.attempt, a.status, value).to_wire()
    text = f"op {result.get('op')} attempt {result.get('attempt')}: {result.get('status')}"
    return _out(ctx, result, text + _already(result))


def _reconcile_unclaimed(ctx: _Context) -> int:
    """contract §3.8: an unknown attempt whose evidence says ``claimed: false``
    never reached its adapter (the adapter is called only after the claim is
    durable), so ``not_executed`` is always right for it."""
    me = ctx.neuron_id()
    todo = [
        a
        for a in _pages(ctx, "list_attempts", "attempts", state="unknown")
        if a.get("neuron") == me
        and a.get("kind") == "guarded"
        and isinstance(a.get("evidence"), Mapping)
        and a["evidence"].get("claimed") is False
    ]
    if not todo:
        return _out(ctx, [], "no unclaimed unknown attempts")
    results: list[dict[str, Any]] = []
    refused = 0
    for a in todo:
        op, attempt = a["op"], a["attempt"]
        if ctx.args.dry_run:
            results.append({"op": op, "attempt": attempt, "dry_run": True})
            if not ctx.json:
                print(f"op {op} attempt {attempt}: would reconcile not_executed (unclaimed)")
            continue
        try:
            result = ctx.session().reconcile(op, attempt, "not_executed", NO_VALUE).to_wire()
        except WarddError as exc:
            refused += 1
            results.append({"op": op, "attempt": attempt, "error": exc.code})
            if not ctx.json:
                print(f"op {op} attempt {attempt}: refused: {exc.code}: {exc.message}")
            continue
        results.append(result)
        if not ctx.json:
            print(f"op {op} attempt {attempt}: not_executed{_already(result)}")
    if ctx.json:
        write_json(results)
    return Exit.REFUSED if refused else Exit.DONE


def _abort(ctx: _Context) -> int:
    a = ctx.args
    result = ctx.session().abort(a.op, a.attempt).to_wire()
    how = (
        "aborted, now unknown"
        if result.get("aborted", True)
        else "ended unknown on its own before the abort's kill reached it"
    )
    text = (
        f"op {result.get('op')} attempt {result.get('attempt')}: {how} "
        f"(its effect may have happened: check, then wardctl reconcile {result.get('op')} "
        f"{result.get('attempt')} --succeeded|--failed|--not-executed)"
    )
    return _out(ctx, result, text)


def _prog_limit(ctx: _Context) -> int:
    a = ctx.args
    if a.step_limit < 0:
        a.parser.error("N must be 0 or more")
    if a.expected_version is not None and a.expected_version < 0:
        a.parser.error("--expected-version must be 0 or more")
    result = (
        ctx.session()
        .set_step_limit(a.prog, a.step_limit, expected_state_version=a.expected_version)
        .to_wire()
    )
    text = (
        f"prog {result.get('prog')}: step limit {result.get('step_limit')} "
        f"(state_version {result.get('state_version')})"
    )
    return _out(ctx, result, text)


_CANCELLED_WHAT = {
    "retained": "its retained result was discarded: it will never be returned",
    "running": "its running attempt's outcome will be recorded but never returned",
    "prepared": "its prepared attempt was voided",
    "unknown": "its unknown attempt stays unknown: reconcile it (docs/recovery.md)",
}


def _cancel(ctx: _Context) -> int:
    result = ctx.session().cancel(ctx.args.op).to_wire()
    lines = [f"op {result.get('op')}: {result.get('state')}{_already(result)}"]
    what = _CANCELLED_WHAT.get(str(result.get("was")))
    if what and not result.get("already"):
        lines.append(what)
    return _out(ctx, result, lines)


def _consume(ctx: _Context) -> int:
    result = ctx.session().consume(ctx.args.op).to_wire()
    lines = [f"op {result.get('op')} consumed (attempt {result.get('attempt')})"]
    lines.extend(tree({"result": result.get("result")}))
    return _out(ctx, result, lines)


def _rebind(ctx: _Context) -> int:
    result = ctx.session().rebind(ctx.args.op).to_wire()
    text = f"op {result.get('op')} bound to epoch {result.get('epoch')}{_already(result)}"
    return _out(ctx, result, text)


def _receipts(ctx: _Context) -> int:
    result = ctx.session().check_receipts().to_wire()
    text = f"checked {result.get('checked')}, resolved {result.get('resolved')}"
    return _out(ctx, result, text)


def _manual_take(ctx: _Context) -> int:
    result = ctx.session().manual_take(ctx.args.op, expected_attempt=ctx.args.attempt).to_wire()
    attempt = result.get("attempt") or {}
    n = attempt.get("attempt")
    lines = [
        f"op {attempt.get('op')}: manual attempt {n} taken (epoch {attempt.get('epoch')})",
        "it is NOT fenced and stays unknown until reconciled:",
        f"  wardctl reconcile {attempt.get('op')} {n} --succeeded|--failed|--not-executed",
    ]
    return _out(ctx, result, lines)


def _completion(ctx: _Context) -> int:
    """The completion script, generated from the parser by shtab (nothing is contacted)."""
    import shtab

    print(shtab.complete(build_parser(), shell=ctx.args.shell))
    return Exit.DONE


# --------------------------------------------------------------------------------
# the command table: build_parser turns it into argparse (here, below the
# handlers it names); the order is the order of --help

_NEURON = _arg(
    "--neuron", metavar="HEX", help="read another neuron's records (default: the neuron of --key)"
)
_LIMIT = _arg(
    "--limit",
    type=_positive_count,
    metavar="N",
    help="show at most the first N (default: all; a last line says when more exist)",
)
_PROG = _arg("prog", metavar="PROG", type=_an_id)
_OP = _arg("op", metavar="OP", type=_an_id)
_EXPECTED_VERSION = _arg(
    "--expected-version",
    type=int,
    metavar="N",
    help="expected state_version, always sent (default: read it first)",
)
#: what `submit` and `call` name: the op's content
_OP_CONTENT = (
    _PROG,
    _arg("op", metavar="OP", type=_an_id, help="the op id (idempotency key)"),
    _arg("act", metavar="ACT", type=_an_id),
    _one_of(
        _arg("--args", metavar="TEXT", help="args as UTF-8 text"),
        _arg("--args-hex", metavar="HEX", help="args as hex digits"),
        _arg("--args-file", metavar="PATH", help="args from a file ('-': stdin)"),
    ),
)
_ATTEMPT_NUMBER = _arg(
    "--attempt", type=int, metavar="N", help="attempt number (default: 1 + attempts so far)"
)

_EPOCH_COMMANDS = (
    _sub_command(
        "advance",
        _epoch_advance,
        "advance the neuron's epoch (retires requests signed before it)",
        description="Advance the neuron's epoch: prepared attempts are voided and "
        "results of older epochs need `rebind` before `consume`.",
    ),
)

_PROG_COMMANDS = (
    _sub_command(
        "create",
        _prog_create,
        "create a prog",
        _PROG,
        _arg(
            "--steps",
            type=int,
            default=DEFAULT_STEP_LIMIT,
            metavar="N",
            help=f"step limit (default: {DEFAULT_STEP_LIMIT})",
        ),
    ),
    _sub_command(
        "state",
        _prog_state,
        "change a prog's state",
        _PROG,
        _arg("state", metavar="STATE", choices=PROG_STATES, help="|".join(PROG_STATES)),
        _arg(
            "--expected",
            metavar="STATE",
            choices=PROG_STATES,
            help="expected current state (default: read it first)",
        ),
        _EXPECTED_VERSION,
        description="active <-> paused, active|paused -> retired, retired -> archived.",
    ),
    _sub_command(
        "recover",
        _prog_recover,
        "release a crashed runner's open step reservations",
        _PROG,
        _arg(
            "--before",
            type=int,
            metavar="N",
            help="release only reservations numbered below N "
            "(default: the prog's reservation_seq, read first: every one made so far)",
        ),
        description="Releases the prog's open reservations numbered below --before "
        "(always sent), so the signed request can never release one made after it.",
    ),
    _sub_command(
        "limit",
        _prog_limit,
        "set a prog's step limit",
        _PROG,
        _arg("step_limit", metavar="N", type=int, help="the new step limit"),
        _EXPECTED_VERSION,
        description="Raise or lower the prog's step limit (not below steps used + reserved). "
        "Raising the limit of an exhausted prog lets new work pass; what the exhaustion "
        "cancelled stays cancelled. Fenced by the prog's state_version.",
    ),
    _sub_command("show", _prog_show, "show a prog", _PROG, _NEURON, read=True),
)

_OP_COMMANDS = (
    _sub_command("show", _op_show, "show an operation and its attempts", _OP, _NEURON, read=True),
)

_RECONCILE_ARGS = (
    _arg("op", metavar="OP", nargs="?", type=_an_id),
    _arg("attempt", metavar="ATTEMPT", type=int, nargs="?"),
    _arg(
        "--unclaimed",
        action="store_true",
        help="reconcile every unclaimed unknown attempt of the neuron as not_executed",
    ),
    _arg("--dry-run", action="store_true", help="with --unclaimed: list them, sign nothing"),
    _one_of(
        _arg("--succeeded", dest="status", action="store_const", const="succeeded"),
        _arg("--failed", dest="status", action="store_const", const="failed"),
        _arg("--not-executed", dest="status", action="store_const", const="not_executed"),
    ),
    _one_of(
        _arg("--value", metavar="TEXT", help="the outcome's value, as text"),
        _arg("--value-hex", metavar="HEX", help="the outcome's value, as bytes"),
    ),
)

_COMMANDS = (
    _command(
        "keygen",
        _keygen,
        "create a neuron key file; print its path and the neuron id",
        _arg("--force", action="store_true", help="replace an existing key file"),
    ),
    _command("status", _status, "summarize the daemon's state", read=True),
    _command(
        "metrics",
        _metrics,
        "print every metric in the Prometheus text format (docs/operations.md)",
        read=True,
    ),
    _command("workers", _workers, "list the workers and their descriptors", read=True),
    _command(
        "neuron", _neuron, "show the neuron's root (epoch, placement, grants)", _NEURON, read=True
    ),
    _command("register", _register, "register the neuron"),
    _command(
        "bind",
        _bind,
        "bind the placement to a worker's current descriptor",
        _arg("--worker", default="w0", help="worker id (default: w0)"),
    ),
    _command("release", _release, "release the placement"),
    _command("epoch", _missing_sub, "epoch commands", subs=_EPOCH_COMMANDS),
    _command(
        "grant",
        _grant,
        "set the grant of a prog: the acts it may use (revokes the others)",
        _PROG,
        _arg("acts", metavar="ACT", nargs="*", help="act tags to grant"),
        _arg("--disable", action="store_true", help="disable the grant"),
        epilog="With --disable and no ACT the prog's current acts are kept.",
    ),
    _command("prog", _missing_sub, "prog commands", subs=_PROG_COMMANDS),
    _command(
        "submit",
        _submit,
        "submit an operation",
        *_OP_CONTENT,
    ),
    _command(
        "invoke",
        _invoke,
        "prepare and execute the op's next attempt",
        _OP,
        _ATTEMPT_NUMBER,
        epilog="Exit status 4 when the attempt failed (no effect), 3 when its outcome is "
        "unknown or the answer was lost (it may have run).",
    ),
    _command(
        "call",
        _call,
        "submit an op and run it in one request; the same call again runs nothing",
        *_OP_CONTENT,
        epilog="A repeated call with the same content answers what the op already is "
        "(already). Exit status 4 when the attempt failed (no effect), 3 when its outcome "
        "is unknown, an attempt of the op is unknown or running (attempt_unknown, "
        "attempt_busy), a refusal says an earlier attempt reached its claim "
        "(data.may_have_run), the op was pruned, or the answer was lost (it may have run); "
        "1 when refused before any attempt of the op reached its claim, or cancelled before "
        "one did.",
    ),
    _command("op", _missing_sub, "operation commands", subs=_OP_COMMANDS),
    _command(
        "ops",
        _ops,
        "list operations (with --state unknown: and their evidence)",
        _arg("--state", choices=OP_STATES, help="|".join(OP_STATES)),
        _arg("--prog", metavar="PROG", type=_an_id),
        _NEURON,
        _LIMIT,
        read=True,
    ),
    _command(
        "attempts",
        _attempts,
        "list attempts in one state across all neurons",
        _arg("--state", required=True, choices=ATTEMPTS_LISTED),
        _arg(
            "--watch",
            type=float,
            metavar="SECONDS",
            help="list again every SECONDS until none is left (then exit 0)",
        ),
        _LIMIT,
        read=True,
    ),
    _command(
        "history",
        _history,
        "show the event records of an operation",
        _OP,
        _NEURON,
        _LIMIT,
        read=True,
    ),
    _command(
        "reconcile",
        _reconcile,
        "record the definite outcome of an unknown attempt",
        *_RECONCILE_ARGS,
        epilog="With --unclaimed (no OP, ATTEMPT or status): every unknown attempt of the "
        "neuron whose evidence says claimed: false never reached its adapter, so each is "
        "reconciled not_executed, one signed request per attempt, each printed. Safe to run "
        "again. Exit status 1 if any was refused.",
    ),
    _command(
        "abort",
        _abort,
        "end a hung call: kill its process group; the attempt becomes unknown",
        _OP,
        _arg("attempt", metavar="ATTEMPT", type=int, nargs="?", help="default: the op's latest"),
        epilog="Only for a running attempt of an act whose adapter can be stopped from "
        "outside (cli). The attempt is recorded unknown with evidence aborted: true (its "
        "effect may have happened), or aborted: false if the call ended unknown on its own "
        "before the kill reached it: check, then reconcile it.",
    ),
    _command("cancel", _cancel, "cancel an operation (executes nothing)", _OP),
    _command("consume", _consume, "take an operation's retained result", _OP),
    _command("rebind", _rebind, "re-attach a retained result to the current epoch", _OP),
    _command("receipts", _receipts, "run the receipts of the neuron's unknown attempts"),
    _command(
        "manual-take",
        _manual_take,
        "take an operation by hand: an unfenced attempt, unknown until reconciled",
        _OP,
        _ATTEMPT_NUMBER,
    ),
    _command(
        "completion",
        _completion,
        "print a shell completion script for wardctl",
        _arg("shell", choices=SHELLS, help="|".join(SHELLS)),
        epilog="bash: wardctl completion bash > ~/.local/share/bash-completion/completions/"
        "wardctl; zsh: wardctl completion zsh > a directory on $fpath, as _wardctl; fish: "
        "wardctl completion fish > ~/.config/fish/completions/wardctl.fish",
    ),
)


if __name__ == "__main__":
    sys.exit(main())
