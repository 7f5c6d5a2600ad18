"""Client-side failures: things that go wrong on *this* side of the socket.

The daemon's refusals are not here: they arrive as wire error codes and are
raised as the `wardd.protocol.WarddError` subclass of their code (the one
error table, contract §4). What is here is what no daemon said: the connection
closed under a request, the daemon sent something the protocol does not
allow, a request too large to frame, a key file that cannot be read.
None of these messages ever carries key material or a token handle.
"""

from __future__ import annotations

__all__ = [
    "ActFailed",
    "ClientError",
    "ConnectionClosed",
    "DaemonUnreachable",
    "DispatchTimedOut",
    "FrameTooLarge",
    "KeyFileError",
    "MayHaveRun",
    "NotSent",
    "RemoteProtocolError",
]


class ClientError(Exception):
    """Base class of every failure the client itself detects."""


class ConnectionClosed(ClientError):
    """The connection ended (or broke) while a request still needed it.

    A request whose reply was lost this way may or may not have been applied
    by the daemon (contract §3.1: its effect does not depend on the connection
    staying open); read the state back before deciding what to do next.
    """


class NotSent(ConnectionClosed):
    """The request was never sent: its connection had already failed (the
    daemon restarted or closed it, or an earlier write broke it), or its own
    write failed before the frame was whole, which the daemon cannot read.

    Nothing this request asked for ran: it is no "may have run", even for
    `invoke`, `execute` or `call`. Connect again (or connect with
    ``reconnect=True``, which does so for the next request by itself) and
    make the same request; an op id keeps it at most once. A
    `ConnectionClosed` too, so code that catches that still catches it.
    """


class DaemonUnreachable(ClientError, ConnectionError):
    """The daemon's socket could not be connected to: nothing was sent.

    `path` is the socket tried and `reason` what the system answered (no such
    file: no daemon made it; connection refused: none listens on it). The
    message adds what to check. A `ConnectionError` too, so code written for
    the bare `OSError` of earlier releases still catches it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"cannot reach wardd at {path}: {reason}. Is the daemon running "
            "(systemctl --user status wardd, or make run in a checkout)? Another socket: "
            "pass its path, or set $WARDD_SOCKET"
        )

    @classmethod
    def of(cls, path: str, exc: OSError) -> DaemonUnreachable:
        """The error for `exc`, raised by connecting to `path`."""
        return cls(path, exc.strerror or str(exc) or type(exc).__name__)


class RemoteProtocolError(ClientError):
    """The daemon sent a frame or reply the wire protocol (contract §4) forbids.

    The connection is unusable afterwards: the client cannot know which
    request a malformed reply belonged to.
    """


class FrameTooLarge(ClientError, ValueError):
    """A request would not fit in one frame of the daemon's `max_frame`.

    Nothing was sent; the connection stays usable.
    """


class KeyFileError(ClientError):
    """A neuron key file is missing, unreadable or in no accepted format.

    The message names the path and the problem, never the file's content.
    """


class MayHaveRun(ClientError):
    """An attempt may have run, and nothing will ever run it again by itself.

    Raised for a dispatch (`invoke`, `execute`, `call`) whose answer leaves the
    attempt in doubt:

    - an ``unknown`` outcome, by ``invoke(..., retry=...)``, which never
      asks again after it;
    - an error the daemon can answer after the claim
      (`wardd.protocol.AFTER_CLAIM_CODES`, e.g. ``internal`` when the
      outcome could not be stored): never a plain refusal. `answer` is
      that error (also the ``__cause__``);
    - `DispatchTimedOut`: the caller's own timeout ended the wait.

    `op` and `attempt` name the attempt (None when not known: an
    ``execute`` knows only its token). Read it back (`get_operation`,
    ``wardctl op show OP``) and resolve it with a receipt
    (`check_receipts`) or a signed `reconcile` before anything else
    (docs/recovery.md).
    """

    def __init__(
        self,
        op: str | None,
        attempt: int | None,
        error: object = None,
        *,
        answer: Exception | None = None,
    ) -> None:
        self.op = op
        self.attempt = attempt
        self.answer = answer
        super().__init__(self._text(error))

    def _text(self, error: object) -> str:
        if self.answer is None:
            why = f" ({error})" if error else ""
            return (
                f"attempt {self.attempt} of op {self.op} is unknown{why}: it may have run; "
                f"resolve it (a receipt, or reconcile) before anything else: {self._look()}"
            )
        code = getattr(self.answer, "code", type(self.answer).__name__)
        return (
            f"{_named(self.op, self.attempt)} may have run: the daemon answered {code} "
            f"({self.answer}), which can come after the claim; read it back before "
            f"anything else: {self._look()}"
        )

    def _look(self) -> str:
        return f"wardctl op show {self.op}" if self.op else "wardctl op show OP"


class DispatchTimedOut(MayHaveRun, TimeoutError):
    """The caller's timeout ended the wait for a dispatch's answer after its
    request was sent: the attempt may have run.

    Raised instead of the cancellation when the deadline of an anyio or trio
    cancel scope around an `invoke`, `execute` or `call` (``anyio.fail_after``,
    ``move_on_after``, ``trio.fail_after``, ...) passes while the answer is
    awaited, and by the blocking `Session` when the `Client`'s socket timeout
    passes then. It is a `TimeoutError` (what ``anyio.fail_after`` raises),
    and a `MayHaveRun` naming the op and attempt. The request is never
    sent again; its late answer is dropped.
    """

    def __init__(self, method: str, op: str | None, attempt: int | None) -> None:
        self.method = method
        super().__init__(op, attempt)

    def _text(self, error: object) -> str:
        return (
            f"the wait for the {self.method} answer timed out after it was sent: "
            f"{_named(self.op, self.attempt)} may have run (it is never sent again); "
            f"read it back before anything else: {self._look()}"
        )


def _named(op: str | None, attempt: int | None) -> str:
    if op is None:
        return "the attempt of the token's op"
    return f"attempt {attempt} of op {op}" if attempt is not None else f"the attempt of op {op}"


class ActFailed(ClientError):
    """An attempt's outcome is definite and without effect: ``failed`` (the
    act raised `DefiniteFailure`) or ``not_executed``.

    Raised by `GuardedTool`. `op`, `attempt` and `error` name the attempt
    and say why; nothing was done, and the same op id never runs again by
    a ``call`` (an ``invoke`` of the op, or a new op id, runs it again).
    """

    def __init__(self, op: str, attempt: int | None, status: str, error: object = None) -> None:
        self.op = op
        self.attempt = attempt
        self.status = status
        self.error = error
        why = f": {error}" if error else ""
        super().__init__(f"attempt {attempt} of op {op} {status}{why}; nothing was done")
