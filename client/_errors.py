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
    "FrameTooLarge",
    "KeyFileError",
    "MayHaveRun",
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
    """An attempt's outcome is ``unknown``: it may have run, and nothing will
    ever run it again by itself.

    Raised by ``invoke(..., retry=...)``, which never asks again after it.
    `op` and `attempt` name the attempt; resolve it with a receipt
    (`check_receipts`) or a signed `reconcile` before anything else
    (docs/recovery.md).
    """

    def __init__(self, op: str, attempt: int | None, error: object = None) -> None:
        self.op = op
        self.attempt = attempt
        why = f" ({error})" if error else ""
        super().__init__(
            f"attempt {attempt} of op {op} is unknown{why}: it may have run; resolve it "
            f"(a receipt, or reconcile) before anything else: wardctl op show {op}"
        )


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
