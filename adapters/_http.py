"""The ``http`` built-in adapter: one HTTP request per call, the fence key in a header (§6).

Table keys: ``adapter``, ``url`` (required), ``method``, ``headers``,
``idempotency_header``, ``idempotency_format``, ``timeout_s``,
``no_effect_statuses``, ``receipt_url``, ``receipt`` (``"replay"``),
``replay_window_s``, ``max_response_bytes``, ``max_arg_bytes``.

How a call ends (the request's body is the act's args; no redirect is
followed and nothing is ever retried):

- no byte of the request was sent — the name did not resolve, the connection
  was refused or did not complete within ``timeout_s``, the TLS handshake
  failed, a secret file could not be read, the daemon's stop (``kill_all``)
  came before the request was sent — `DefiniteFailure` (failed);
- a complete response with a 2xx status → succeeded, with ``{"status": int,
  "headers": {"content-type", "location" (those present)}, "body": bytes,
  "truncated": bool}`` (the body is kept up to ``max_response_bytes``);
- a complete response with a status in ``no_effect_statuses`` →
  `DefiniteFailure` (the server asserts nothing happened);
- any other status (3xx, 409, 425, 429, 5xx, …) → `OutcomeUnknown`;
- once the connection is up, anything else — a reset or EOF while sending
  or before the response is complete, ``timeout_s`` passing, an ``abort`` —
  → `OutcomeUnknown`: the server may have acted on the request.

"Complete" is the response's own framing (`_http_wire`): its header block
ended with the blank line, and its body with ``Content-Length`` bytes or the
last chunk, unless it has none by definition (1xx, 204, 304, a ``HEAD``). A
response cut before that, or whose body runs to the close, is
`OutcomeUnknown` whatever its status; so is a receipt's answer.

Decisions:

- The client is urllib3's low-level `HTTPConnection` (no pool, no
  retries, no redirects: those live in urllib3's pools, which are not used),
  its response read by `_http_wire.FramedResponse`. The whole body is read
  (what exceeds ``max_response_bytes`` is dropped as it comes), so that its
  end can be checked.
  Its ``connect()`` is a call of its own, so "no byte was sent" is exactly
  "``connect()`` raised", and the socket it leaves is the one closed on an
  abort, at ``kill_all`` and at the deadline.
- ``timeout_s`` bounds the whole call, connection included. Each socket
  operation has it as its own timeout, and a watchdog thread of the adapter
  (``wardd-http-<tag>``, started at the first call) shuts the socket down
  (``shutdown(SHUT_RDWR)``, which wakes a thread blocked in it) when the
  call's deadline passes, so a server trickling bytes cannot hold a call
  past it. A name lookup is not bounded by it (the resolver is
  blocking); a connection still being made at the deadline ends with its
  own socket timeout, as failed (nothing was sent).
- Secret header values (``headers.NAME = {file = "/path"}``) are read when
  the adapter is built (``check-config`` and start: a missing or unreadable
  file is a config error naming the key) **and** again at every call and
  receipt, so a rotated token takes effect at the next call without a
  restart; a file that cannot be read at a call fails it before anything is
  sent. One trailing newline is stripped; a file over 64 KiB or holding a
  NUL, CR or LF byte is refused. Their values are redacted
  (``[redacted]``) from the response body, the headers kept, and every
  error text; they are never logged or stored. A value of the form
  ``<scheme> <credentials>`` (``Bearer abc…``) has its credentials redacted
  on their own too, when they are at least 8 bytes: a server may echo a
  token without its scheme.
- The key header's value is the idempotency key ``<neuron>/<op>/<attempt>``
  (``idempotency_format = "key"``) or its UUIDv5 in `KEY_NAMESPACE`
  (``"uuid5"``, for APIs that want a UUID).
- The receipt (``receipt_url``, with ``{key}`` replaced by the key as sent,
  percent-encoded) is a ``GET`` with the configured headers and the key
  header: 200 → ``executed`` (the value is the body, or null when it
  exceeds ``max_response_bytes``), 404 → ``not_executed``, anything else or
  an error → ``unknown``. It never sends the original request again. The
  adapter declares ``in_process``, so a 404 resolves an unknown attempt
  ``not_executed`` at start and on ``check_receipts``: the API's 404 must
  mean that the request with that key had no effect *and never will*
  (docs/contract.md §6).
- The claim records the ``url``, ``receipt_url``, ``idempotency_header``
  and ``idempotency_format`` the call used. The receipt asks the recorded
  ``receipt_url`` with the recorded key form, so a reconfigured act never
  makes a receipt look up a key the call never sent; a claim made without
  ``receipt_url`` is asked at the current one, and its ``not_executed`` is
  then only ``unknown``. So is the 404 for a claim made with no key header
  (``idempotency_header = ""``, which ``receipt_url`` is now refused with):
  the server never received that key. An attempt never claimed (the
  daemon passes no claim) never began its call: its receipt is
  ``not_executed`` without asking the server.
- ``receipt = "replay"`` (with ``replay_window_s``, excluding
  ``receipt_url``) sends the call's request again instead, for APIs that
  keep their answers by key and offer no lookup (`_http_replay`): the claim
  then also records the method and headers (a secret one by its file's
  path), and the daemon hands the receipt the op's args and the claim's
  time (`SentCall`, ``receipt_resends``).
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Self

import attrs
from urllib3.response import BaseHTTPResponse

from . import _config, _redact
from ._base import (
    ActRequest,
    Adapter,
    AdapterConfigError,
    BaseAdapter,
    CallAborted,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
    SentCall,
)
from ._config import SecretFile
from ._http_replay import REPLAY, Replay, replay_record
from ._http_replay import answer as replay_answer
from ._http_wire import (
    BAD_VALUE,
    Connection,
    FramedConnection,
    FramedTlsConnection,
    HeaderValue,
    ResponseCut,
)

_KEYS = (
    "adapter",
    "url",
    "method",
    "headers",
    "idempotency_header",
    "idempotency_format",
    "timeout_s",
    "no_effect_statuses",
    "receipt_url",
    "receipt",
    "replay_window_s",
    "max_response_bytes",
    "max_arg_bytes",
)
DEFAULT_METHOD = "POST"
DEFAULT_IDEMPOTENCY_HEADER = "Idempotency-Key"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_NO_EFFECT_STATUSES = (400, 401, 403, 404, 405, 415, 422)
FRAME_RESERVE = 65536  # room left in a frame beside the body, as for cli stdout
CREDENTIALS_MIN_BYTES = 8  # shorter credentials after a scheme are not redacted on their own
USER_AGENT = "wardd"
#: The namespace of ``idempotency_format = "uuid5"``: uuid5(NAMESPACE_URL, "wardd:idempotency-key").
KEY_NAMESPACE = uuid.UUID("474ac64f-29bb-5c4a-8fa9-a1a40f25b83d")
_READ_SIZE = 65536
_MESSAGE_BODY_CHARS = 256
_ABORTED_KEPT = 1024  # keys are unique per attempt: an old one never matches again
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # RFC 9110 token
_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def key_value(idempotency_key: str, fmt: str) -> str:
    """The key header's value (and the receipt's ``{key}``) for ``fmt``."""
    if fmt == "uuid5":
        return str(uuid.uuid5(KEY_NAMESPACE, idempotency_key))
    return idempotency_key


def secret_forms(value: bytes) -> list[bytes]:
    """What to redact for a secret header value: the value, and for ``<scheme> <credentials>``
    the credentials on their own (at least `CREDENTIALS_MIN_BYTES`), which a server may echo
    without the scheme (``invalid token <credentials>``)."""
    if not value:
        return []
    forms = [value]
    scheme, sep, rest = value.partition(b" ")
    credentials = rest.strip(b" \t")
    if sep and _TOKEN.match(scheme.decode("latin-1")) and len(credentials) >= CREDENTIALS_MIN_BYTES:
        forms.append(credentials)
    return forms


# -- configuration ---------------------------------------------------------------------------


@attrs.frozen
class Target:
    """A checked URL: scheme, host, port and the request target (path and query)."""

    url: str
    https: bool
    host: str
    port: int
    target: str

    @classmethod
    def parse(cls, url: str, key: str) -> Target:
        """Check ``url`` (http or https, a host, no user info or fragment); `AdapterConfigError`."""
        if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
            raise AdapterConfigError(key, "must not contain spaces or control characters")
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise AdapterConfigError(key, f"is not a valid URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise AdapterConfigError(key, f"must be an http:// or https:// URL, got {url!r}")
        if not parts.hostname:
            raise AdapterConfigError(key, "has no host")
        if parts.username is not None or parts.password is not None:
            raise AdapterConfigError(
                key, "must not hold user info: send credentials in a header {file = ...}"
            )
        if parts.fragment or url.endswith("#"):
            raise AdapterConfigError(key, "must not have a fragment (#...)")
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        https = scheme == "https"
        return cls(url, https, parts.hostname, port or (443 if https else 80), target)


def _status_list(value: object, key: str) -> frozenset[int]:
    if not isinstance(value, list):
        raise AdapterConfigError(key, "must be a list of HTTP status codes")
    codes = set()
    for i, item in enumerate(value):
        if not _config.is_int(item) or not 300 <= item <= 599:
            # 1xx are interim, never an answer; 2xx are successes
            raise AdapterConfigError(f"{key}[{i}]", "must be an integer from 300 to 599")
        if 200 <= item <= 299:
            raise AdapterConfigError(f"{key}[{i}]", f"{item} is a success, not a no-effect status")
        codes.add(int(item))
    return frozenset(codes)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '\\"') + '"'


def _parse_headers(value: object, idem_header: str) -> tuple[tuple[str, HeaderValue], ...]:
    if not isinstance(value, Mapping):
        raise AdapterConfigError("headers", 'must be a table of "Name" = string or {file = path}')
    seen: set[str] = set()
    items: list[tuple[str, HeaderValue]] = []
    for name in value:
        key = f"headers.{_quoted(str(name))}"
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise AdapterConfigError(key, "is not a valid header name (RFC 9110 token characters)")
        lower = name.lower()
        if idem_header and lower == idem_header.lower():
            raise AdapterConfigError(
                key, f"is the idempotency header: the adapter sets {idem_header} on every request"
            )
        if lower in _FRAMING:
            raise AdapterConfigError(key, "is set by the adapter (Host and the body's framing)")
        if lower in seen:
            raise AdapterConfigError(key, "is given twice (header names ignore case)")
        seen.add(lower)
        items.append((name, _parse_header_value(value[name], key)))
    return tuple(items)


def _parse_header_value(value: object, key: str) -> HeaderValue:
    if isinstance(value, str):
        if BAD_VALUE.search(value):
            raise AdapterConfigError(key, "must not contain NUL, CR or LF")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise AdapterConfigError(key, "must be Latin-1 text (HTTP header bytes)") from None
        return value
    if isinstance(value, Mapping):
        for inner in sorted(value):
            if inner != "file":
                raise AdapterConfigError(f"{key}.{inner}", "unknown key")
        if "file" not in value:
            raise AdapterConfigError(f"{key}.file", "missing (the secret file's absolute path)")
        secret = SecretFile(_config.absolute_path(value["file"], f"{key}.file"))
        try:
            secret.read(header=True)  # at build: check-config and the start find a bad file
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise AdapterConfigError(
                f"{key}.file", f"cannot read the secret file {secret.path}: {reason}"
            ) from None
        except ValueError as exc:
            why = f"the secret file {secret.path} {exc}"
            raise AdapterConfigError(f"{key}.file", why) from None
        return secret
    raise AdapterConfigError(key, 'must be a string or a table {file = "/path"}')


def _receipt_keys(table: Mapping[str, Any], idem: str) -> tuple[str | None, float | None]:
    """(``receipt_url``, the ``replay_window_s`` of ``receipt = "replay"``): one at most."""
    url, how, window = table.get("receipt_url"), table.get("receipt"), table.get("replay_window_s")
    if how is not None and how != REPLAY:
        raise AdapterConfigError(
            "receipt", f'must be "replay" (send the request again to learn its fate), got {how!r}'
        )
    if how is None and window is not None:
        raise AdapterConfigError("replay_window_s", 'only with receipt = "replay"')
    if how is not None and url is not None:
        raise AdapterConfigError("receipt", '"replay" and receipt_url exclude each other')
    if how is not None and window is None:
        raise AdapterConfigError(
            "replay_window_s",
            'missing: required with receipt = "replay" (how long the API keeps a key, in seconds)',
        )
    if (url is not None or how is not None) and not idem:
        # the server never sees a key: its 404 for one cannot say "not applied",
        # and a request sent again would act again (§6)
        key = "receipt_url" if url is not None else "receipt"
        raise AdapterConfigError(key, 'needs an idempotency_header (not ""): the key is never sent')
    return (
        None if url is None else _receipt_target(url),
        None if how is None else _config.positive_seconds(window, "replay_window_s"),
    )


def _receipt_target(value: object) -> str:
    url = _config.text(value, "receipt_url", what="a URL string containing {key}")
    if "{key}" not in url:
        raise AdapterConfigError("receipt_url", "must contain {key} (where the key goes)")
    Target.parse(url.replace("{key}", "k"), "receipt_url")
    if "{key}" in urllib.parse.urlsplit(url).netloc:
        raise AdapterConfigError("receipt_url", "{key} must be in the path or the query")
    return url


# -- calls in flight -------------------------------------------------------------------------


@attrs.define(eq=False)
class _Flight:
    """One request in flight: its socket (once connected) and what ended it."""

    key: str
    deadline: float
    handle: socket.socket | None = None  # a duplicate of the connection's descriptor
    aborted: bool = False
    timed_out: bool = False
    done: bool = False

    @property
    def overdue(self) -> bool:
        """The deadline has passed, whether or not the watchdog has shut the
        connection yet: on a loaded machine the socket's own timeout (the same
        ``timeout_s``, counted from a little later) can fire first."""
        return self.timed_out or time.monotonic() >= self.deadline


def _handle(sock: socket.socket) -> socket.socket:
    """A plain socket on a duplicate of ``sock``'s descriptor, closed only by `Flights`.

    Shutting a connection down through it reaches the same connection (a
    shutdown acts on the socket, not on the descriptor) but never a
    descriptor that the calling thread's close freed and the process reused;
    and, being plain, it never touches an SSL socket's state under a reading
    thread's feet."""
    return socket.socket(sock.family, sock.type, sock.proto, fileno=os.dup(sock.fileno()))


def _shutdown(handle: socket.socket) -> None:
    """``shutdown(SHUT_RDWR)``: wakes a thread blocked sending or receiving on it."""
    try:
        handle.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more: nothing to wake


class Flights:
    """The adapter's requests in flight, for ``abort``, ``kill_all`` and the deadline.

    Thread-safe. A call's connection is shut down through a duplicate of its
    descriptor (`_handle`), which only `end` closes, under the lock, when it
    forgets the call: a shutdown never reaches a closed (and maybe reused)
    descriptor. Keys aborted before their call began are kept (the last
    1024) so that the call, when it begins, sends nothing.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._by_key: dict[str, _Flight] = {}
        self._aborted: dict[str, None] = {}  # keys aborted before their call began
        self._deadlines: list[tuple[float, int, _Flight]] = []
        self._seq = itertools.count()
        self._watchdog: threading.Thread | None = None
        self._closed = False

    def begin(self, key: str, timeout_s: float) -> _Flight:
        """Register a call; `DefiniteFailure` after `kill_all`, `OutcomeUnknown`
        when an abort for ``key`` came first (nothing is sent)."""
        with self._cond:
            if self._closed:
                raise DefiniteFailure("the adapter has been shut down; nothing was sent")
            if key in self._aborted:
                del self._aborted[key]
                raise CallAborted("aborted by the operator before the request was sent")
            flight = _Flight(key, time.monotonic() + timeout_s)
            self._by_key[key] = flight
            heapq.heappush(self._deadlines, (flight.deadline, next(self._seq), flight))
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch, name=f"wardd-http-{self._name}", daemon=True
                )
                self._watchdog.start()
            self._cond.notify_all()
            return flight

    def attach(self, flight: _Flight, sock: socket.socket) -> None:
        """The call's connection is up: from now on an abort or the deadline shuts it."""
        handle = _handle(sock)
        with self._cond:
            flight.handle = handle
            if flight.aborted or flight.timed_out or self._closed:
                _shutdown(handle)

    def end(self, flight: _Flight, conn: Connection) -> None:
        """The call is over: forget it and close its connection (under the lock)."""
        with self._cond:
            flight.done = True
            if self._by_key.get(flight.key) is flight:
                del self._by_key[flight.key]
            for close in (conn.close, flight.handle.close if flight.handle else None):
                try:
                    if close is not None:
                        close()
                except OSError:
                    pass  # nothing buffered is lost: the outcome is already decided
            flight.handle = None

    def abort(self, key: str) -> None:
        """Shut the connection of the call for ``key``, now or as soon as it is up."""
        with self._cond:
            flight = self._by_key.get(key)
            if flight is None:
                self._aborted[key] = None
                while len(self._aborted) > _ABORTED_KEPT:
                    del self._aborted[next(iter(self._aborted))]
                return
            flight.aborted = True
            if flight.handle is not None:
                _shutdown(flight.handle)

    def kill_all(self) -> None:
        """Shut every connection and refuse new calls (the daemon's stop)."""
        with self._cond:
            self._closed = True
            for flight in self._by_key.values():
                if flight.handle is not None:
                    _shutdown(flight.handle)

    @property
    def closed(self) -> bool:
        """`kill_all` has run: no new request is sent."""
        with self._cond:
            return self._closed

    @property
    def live(self) -> int:
        """How many calls are in flight."""
        with self._cond:
            return len(self._by_key)

    def _watch(self) -> None:
        """Shut the connection of every call whose deadline passed (the watchdog thread)."""
        with self._cond:
            while True:
                while self._deadlines and self._deadlines[0][2].done:
                    heapq.heappop(self._deadlines)
                if not self._deadlines:
                    self._cond.wait()
                    continue
                deadline, _, flight = self._deadlines[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._deadlines)
                flight.timed_out = True
                if flight.handle is not None:
                    _shutdown(flight.handle)


# -- the adapter -----------------------------------------------------------------------------


@attrs.frozen
class _Request:
    """One request to send: where, how, and the secrets to redact from what comes back."""

    key: str  # names the flight (abort finds a call by its idempotency key)
    target: Target
    method: str
    body: bytes
    headers: Mapping[str, str]
    secrets: Sequence[bytes]
    keep_body: int  # the response body kept, at most


@attrs.frozen
class _Response:
    status: int
    headers: dict[str, str]
    body: bytes  # redacted, at most the limit
    truncated: bool

    @property
    def value(self) -> dict[str, Any]:
        """The result of a 2xx (a call's value, and a replay's)."""
        return {
            "status": self.status,
            "headers": self.headers,
            "body": self.body,
            "truncated": self.truncated,
        }


@attrs.frozen
class HttpSettings:
    """An ``http`` act's table, validated (its secret files read once, to check them)."""

    tag: str
    target: Target
    max_arg_bytes: int
    max_response_bytes: int
    method: str = DEFAULT_METHOD
    headers: tuple[tuple[str, HeaderValue], ...] = ()
    idempotency_header: str = DEFAULT_IDEMPOTENCY_HEADER
    idempotency_format: str = "key"
    timeout_s: float = DEFAULT_TIMEOUT_S
    no_effect_statuses: frozenset[int] = frozenset(DEFAULT_NO_EFFECT_STATUSES)
    receipt_url: str | None = None
    replay_window_s: float | None = None  # set: receipt = "replay" (`_http_replay`)

    @classmethod
    def from_table(cls, tag: str, table: Mapping[str, Any], *, max_frame: int) -> Self:
        """Validate the act's table (reading its secret files); raises `AdapterConfigError`."""
        _config.refuse_unknown_keys(table, _KEYS)
        if "url" not in table:
            raise AdapterConfigError("url", "missing (the http:// or https:// URL to send to)")
        target = Target.parse(_config.text(table["url"], "url", what="a URL string"), "url")
        method = _config.text(table.get("method", DEFAULT_METHOD), "method")
        if not _TOKEN.match(method):
            raise AdapterConfigError("method", f"is not an HTTP method (a token), got {method!r}")
        idem = table.get("idempotency_header", DEFAULT_IDEMPOTENCY_HEADER)
        if not isinstance(idem, str) or (idem and not _TOKEN.match(idem)):
            raise AdapterConfigError("idempotency_header", 'must be a header name, or "" for none')
        fmt = table.get("idempotency_format", "key")
        if fmt not in ("key", "uuid5"):
            raise AdapterConfigError("idempotency_format", 'must be "key" or "uuid5"')
        limit = max_frame - FRAME_RESERVE
        body_max = table.get("max_response_bytes", limit)
        if not _config.is_int(body_max) or not 0 <= body_max <= limit:
            raise AdapterConfigError(
                "max_response_bytes", f"must be an integer from 0 to max_frame - 65536 ({limit})"
            )
        receipt, window = _receipt_keys(table, idem)
        return cls(
            tag=tag,
            target=target,
            max_arg_bytes=_config.max_arg_bytes(table, max_frame=max_frame),
            max_response_bytes=int(body_max),
            method=method,
            headers=_parse_headers(table.get("headers", {}), idem),
            idempotency_header=idem,
            idempotency_format=str(fmt),
            timeout_s=_config.positive_seconds(
                table.get("timeout_s", DEFAULT_TIMEOUT_S), "timeout_s"
            ),
            no_effect_statuses=_status_list(
                table.get("no_effect_statuses", list(DEFAULT_NO_EFFECT_STATUSES)),
                "no_effect_statuses",
            ),
            receipt_url=receipt,
            replay_window_s=window,
        )

    def build(self, boot: str | None = None) -> Adapter:
        """The act's adapter, from these settings (no secret file is read again)."""
        return _config.adapter_from(HttpAdapter, self)


@attrs.define(eq=False)
class HttpAdapter(BaseAdapter, HttpSettings):
    """Sends one HTTP request per call; in-process, abortable, with an optional receipt."""

    kind: str = attrs.field(default="http", init=False)
    in_process: bool = attrs.field(default=True, init=False)
    abortable: bool = attrs.field(default=True, init=False)
    _flights: Flights = attrs.field(
        init=False, default=attrs.Factory(lambda self: Flights(self.tag), takes_self=True)
    )

    @property
    def receipt_supported(self) -> bool:
        """A receipt is offered only with ``receipt_url`` or ``receipt = "replay"``."""
        return self.receipt_url is not None or self.replay_window_s is not None

    @property
    def receipt_resends(self) -> bool:
        """``receipt = "replay"``: the receipt needs the call's args and time (`SentCall`)."""
        return self.replay_window_s is not None

    @property
    def live(self) -> int:
        """Requests in flight (calls and receipts)."""
        return self._flights.live

    def claim_info(self) -> dict[str, Any]:
        """Where the call goes and how its key is sent, for its receipt (module
        docstring); with ``receipt = "replay"``, the rest of the request but its
        body (`_http_replay.replay_record`)."""
        info = {
            "url": self.target.url,
            "receipt_url": self.receipt_url,
            "idempotency_header": self.idempotency_header,
            "idempotency_format": self.idempotency_format,
        }
        if self.replay_window_s is not None:
            info |= replay_record(self.method, self.headers, self.replay_window_s)
        return info

    def abort(self, idempotency_key: str) -> None:
        """Shut the connection of the call for ``idempotency_key``: it ends unknown."""
        self._flights.abort(idempotency_key)

    def kill_all(self) -> None:
        """Shut every connection in flight and refuse new calls (the daemon's stop)."""
        self._flights.kill_all()

    def call(self, request: ActRequest) -> dict[str, Any]:
        """Send the request once (see the module docstring for how it ends)."""
        if len(request.args) > self.max_arg_bytes:
            raise DefiniteFailure(f"args of {len(request.args)} bytes exceed {self.max_arg_bytes}")
        headers, secrets = self._headers(
            self.headers,
            self.idempotency_header,
            key_value(request.idempotency_key, self.idempotency_format),
        )
        _trace_headers(headers, request.traceparent, request.tracestate)
        got = self._exchange(
            _Request(
                request.idempotency_key,
                self.target,
                self.method,
                request.args,
                headers,
                secrets,
                self.max_response_bytes,
            )
        )
        said = _body_excerpt(got.body)
        if 200 <= got.status <= 299:
            return got.value
        if got.status in self.no_effect_statuses:
            raise DefiniteFailure(f"{self.tag}: HTTP {got.status} (a no-effect status){said}")
        raise OutcomeUnknown(f"{self.tag}: HTTP {got.status}{said}")

    def receipt(
        self,
        idempotency_key: str,
        claim_info: Mapping[str, Any] | None = None,
        sent: SentCall | None = None,
        *,
        traceparent: str | None = None,
    ) -> Receipt:
        """GET the receipt URL for the key, or (``receipt = "replay"``) send the
        call's request again; never raises (module docstring, `_http_replay`).
        ``traceparent``: the dispatch span the call sent, sent again on the GET."""
        if claim_info is None:  # never claimed: the call never began, so nothing was sent
            return Receipt("not_executed")
        if self.replay_window_s is not None:
            return self._replay(idempotency_key, claim_info, sent)
        return self._look_up(idempotency_key, claim_info, traceparent)

    def _look_up(
        self, idempotency_key: str, claim_info: Mapping[str, Any], traceparent: str | None
    ) -> Receipt:
        """GET the receipt URL the claim recorded for the key as the call sent it."""
        url, header, fmt, hint = _receipt_plan(claim_info, self)
        if url is None:
            return Receipt("unknown", detail="no receipt_url configured")
        key = key_value(idempotency_key, fmt)
        secrets: list[bytes] = []
        try:
            headers, secrets = self._headers(self.headers, header, key)
            _trace_headers(headers, traceparent, None)
            target = Target.parse(url.replace("{key}", urllib.parse.quote(key, safe="")), "url")
            got = self._exchange(
                _Request(
                    f"receipt {idempotency_key}",
                    target,
                    "GET",
                    b"",
                    headers,
                    secrets,
                    self.max_response_bytes,
                )
            )
        except Exception as exc:  # noqa: BLE001 - a receipt never raises: it cannot tell
            reason = _redact.redact_text(_describe(exc), secrets)
            return Receipt("unknown", detail=f"receipt request failed ({reason})")
        if got.status == 200:
            return Receipt("executed", None if got.truncated else got.body)
        if got.status == 404 and hint is None:
            return Receipt("not_executed")
        if got.status == 404:
            return Receipt("unknown", detail=f"receipt_url answered 404, but {hint}")
        return Receipt("unknown", detail=f"receipt_url answered HTTP {got.status}")

    def _replay(
        self, idempotency_key: str, claim_info: Mapping[str, Any], sent: SentCall | None
    ) -> Receipt:
        """Send the request the claim recorded again, with the op's args as its
        body, while the replay window lasts (`_http_replay`)."""
        assert self.replay_window_s is not None
        replay = Replay.from_record(claim_info)
        if isinstance(replay, str):
            return Receipt("unknown", detail=replay)
        if sent is None:
            return Receipt("unknown", detail="no record of the call's args was handed over")
        late = replay.too_late(sent, self.replay_window_s)
        if late is not None:
            return Receipt("unknown", detail=late)
        secrets: list[bytes] = []
        try:
            key = key_value(idempotency_key, replay.key_format)
            headers, secrets = self._headers(replay.headers, replay.key_header, key)
            target = Target.parse(replay.url, "url")
            req = _Request(
                f"receipt {idempotency_key}",
                target,
                replay.method,
                sent.args,
                headers,
                secrets,
                self.max_response_bytes,
            )
            got = self._exchange(req)
        except Exception as exc:  # noqa: BLE001 - a receipt never raises: it cannot tell
            reason = _redact.redact_text(_describe(exc), secrets)
            return Receipt("unknown", detail=f"the replay failed ({reason})")
        return replay_answer(got.status, got.value, self.no_effect_statuses)

    def _headers(
        self, items: Sequence[tuple[str, HeaderValue]], key_header: str, key: str
    ) -> tuple[dict[str, str], list[bytes]]:
        """The request's headers from ``items`` and the key, and the secret values
        in them (read now)."""
        out: dict[str, str] = {}
        secrets: list[bytes] = []
        for name, value in items:
            if isinstance(value, SecretFile):
                try:
                    data = value.read(header=True)
                except (OSError, ValueError) as exc:
                    why = getattr(exc, "strerror", None) or str(exc)
                    raise DefiniteFailure(
                        f"{self.tag}: cannot read the secret file for header {name} "
                        f"({value.path}): {why}; nothing was sent"
                    ) from None
                secrets += secret_forms(data)
                out[name] = data.decode("latin-1")
            else:
                out[name] = value
        if key_header:
            out[key_header] = key
        if not any(n.lower() == "user-agent" for n in out):
            out["User-Agent"] = USER_AGENT
        return out, secrets

    def _exchange(self, req: _Request) -> _Response:
        """Connect, send, read the whole (bounded) response; raises as the module docstring says."""
        target, secrets = req.target, req.secrets
        conn = _connection(target, self.timeout_s)
        flight = self._flights.begin(req.key, self.timeout_s)
        try:
            try:
                conn.connect()
            except Exception as exc:  # noqa: BLE001 - nothing was sent, whatever the cause
                reason = _redact.redact_text(_describe(exc), secrets)
                raise DefiniteFailure(
                    f"{self.tag}: cannot connect to {target.host}:{target.port} ({reason}); "
                    "nothing was sent"
                ) from None
            assert conn.sock is not None
            self._flights.attach(flight, conn.sock)
            if flight.aborted:
                raise CallAborted(f"{self.tag}: aborted before the request was sent")
            if flight.timed_out:
                raise DefiniteFailure(
                    f"{self.tag}: timed out after {self.timeout_s:g} s while connecting; "
                    "nothing was sent"
                )
            if self._flights.closed:  # kill_all came while connecting: the stop sends nothing
                raise DefiniteFailure(
                    f"{self.tag}: the adapter has been shut down; nothing was sent"
                )
            try:
                got = _send_and_read(conn, req)
            except Exception as exc:  # noqa: BLE001 - the request may have reached the server
                raise self._cut_short(flight, _describe(exc), secrets) from None
            if flight.aborted or flight.timed_out:
                # our shutdown reads as an EOF, which http.client may take for the end of
                # the headers or of a body that runs to the close: never a response
                raise self._cut_short(flight, "the response was cut", secrets)
            return got
        finally:
            self._flights.end(flight, conn)

    def _cut_short(self, flight: _Flight, why: str, secrets: Sequence[bytes]) -> OutcomeUnknown:
        """The unknown end of a call cut after its connection was up; `CallAborted`
        when the operator's abort closed it (contract §3.8: ``aborted: true``)."""
        reason = _redact.redact_text(why, secrets)
        if flight.aborted:
            return CallAborted(f"{self.tag}: connection closed by the abort ({reason})")
        if flight.overdue:
            return OutcomeUnknown(
                f"{self.tag}: timed out after {self.timeout_s:g} s; connection closed ({reason})"
            )
        return OutcomeUnknown(f"{self.tag}: the exchange failed after the request began ({reason})")


def _receipt_plan(
    claim_info: Mapping[str, Any], now: HttpAdapter
) -> tuple[str | None, str, str, str | None]:
    """(receipt URL, key header, key format, why a 404 is only a hint) for a
    claim, ``now`` being the act's adapter as configured today.

    A 404 means ``not_executed`` only when the call sent its key to the
    server and the receipt asks for that key there; otherwise the fourth
    item says why not."""
    no_key = 'the call sent no key (idempotency_header was "")'
    if not isinstance(claim_info, Mapping) or "idempotency_format" not in claim_info:
        # a claim of another adapter, or of an older wardd
        hint = None if now.idempotency_header else no_key
        return now.receipt_url, now.idempotency_header, now.idempotency_format, hint
    url = claim_info.get("receipt_url")
    header = claim_info.get("idempotency_header")
    fmt = claim_info.get("idempotency_format")
    if not isinstance(header, str) or fmt not in ("key", "uuid5"):
        return None, "", "key", "the claim is unreadable"
    if url is None:
        return now.receipt_url, header, str(fmt), "the claim was made without receipt_url"
    if not isinstance(url, str):
        return None, "", "key", "the claim is unreadable"
    if not header:
        return url, header, str(fmt), no_key
    return url, header, str(fmt), None


def _connection(target: Target, timeout_s: float) -> Connection:
    if target.https:
        return FramedTlsConnection(target.host, target.port, timeout=timeout_s)
    return FramedConnection(target.host, target.port, timeout=timeout_s)


def _send_and_read(conn: Connection, req: _Request) -> _Response:
    """Send the request and read the whole response; `ResponseCut` when it ended
    before its framing did (`_http_wire`: then its status answers nothing)."""
    conn.request(
        req.method,
        req.target.target,
        body=req.body or None,
        headers=req.headers,
        preload_content=False,
        decode_content=False,
    )
    resp = conn.getresponse()
    framed = conn.framed
    assert framed is not None  # the response just read is one
    secrets, keep = req.secrets, req.keep_body
    try:
        if not framed.head_ended:  # the body's framing is not even known
            raise ResponseCut(f"HTTP {resp.status}: {framed.cut()}")
        # keep the longest secret's length more than is shown: an occurrence crossing
        # the cut is whole in what was read, and so redacted whole (_redact)
        raw, more = _read_body(resp, keep + _redact.longest(secrets))
    finally:
        resp.close()
    why = framed.cut()
    if why is not None:
        raise ResponseCut(f"HTTP {resp.status}: {why}")
    kept = _redact.redact_window(raw, secrets, 0, min(len(raw), keep))
    truncated = more or len(raw) > keep or len(kept) > keep
    kept_headers = {
        name: _redact.redact_text(resp.headers[name], secrets)
        for name in ("content-type", "location")
        if name in resp.headers
    }
    return _Response(resp.status, kept_headers, kept[:keep], truncated)


def _read_body(resp: BaseHTTPResponse, size: int) -> tuple[bytes, bool]:
    """The body's first ``size`` bytes, and whether it held more. The body is
    read to its end (the rest dropped as it streams in), so that its framing
    can be checked; ``timeout_s`` bounds the time that takes."""
    data = bytearray()
    more = False
    while chunk := resp.read(_READ_SIZE):
        room = size - len(data)
        more = more or len(chunk) > room
        data += chunk[: max(room, 0)]
    return bytes(data), more


def _body_excerpt(body: bytes) -> str:
    if not body:
        return ""
    text = body[:_MESSAGE_BODY_CHARS].decode("utf-8", "replace")
    return f"; body: {text!r}"


def _describe(exc: BaseException) -> str:
    """An exception as ``Type: message``, its urllib3 wrapper's cause included."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text


def _trace_headers(headers: dict[str, str], parent: str | None, state: str | None) -> None:
    """The dispatch span's W3C trace context, as ``traceparent`` and
    ``tracestate`` headers (docs/operations.md, "Traces"); a header of the
    same name in the act's ``headers`` is kept as configured."""
    taken = {n.lower() for n in headers}
    for name, value in (("traceparent", parent), ("tracestate", state)):
        if value is not None and name not in taken:
            headers[name] = value
