"""The ``cli`` built-in adapter: one run of a configured program per call (docs/configuration.md).

Table keys: ``adapter``, ``argv`` (required), ``max_arg_bytes``,
``no_effect_exits``, ``timeout_s``, ``env``, ``receipt_argv``.

How a call ends:

- exit 0 → succeeded with ``{"stdout": bytes, "stderr_tail": str,
  "truncated": bool}``;
- an exit in ``no_effect_exits`` → `DefiniteFailure` (the program asserts
  it did nothing);
- the program cannot be spawned (``ENOENT``, ``EACCES``, ``ENOEXEC``, …), a
  secret file cannot be read, the adapter was shut down: `DefiniteFailure`,
  the program never started;
- any other exit, death by a signal, ``timeout_s`` passed (the group is
  SIGKILLed), a wait error → `OutcomeUnknown`;
- the operator's ``abort`` killed the program (its leader died of that
  SIGKILL), or came before it started → `CallAborted` (unknown). A program
  that had already exited when the abort's kill came keeps its own end.

A program need not read its input: a broken stdin pipe (it closed stdin or
exited before reading all args) is not an error by itself; the exit status
decides as above.

Decisions:

- Secret files (``env.NAME = {file = "/path"}``) are read at **every call**
  (and every receipt run), never at build time and never cached: a rotated
  secret takes effect at the next call, ``check-config`` does not need to
  read secrets, and an unreadable one fails only the calls that need it
  (before anything starts: `DefiniteFailure`). One trailing newline
  (``\\n`` or ``\\r\\n``) is stripped; a file over 64 KiB or holding a NUL
  byte is refused. Only file values are secrets: a plain string in ``env``
  is configuration and is not redacted.
- Secret values are redacted (``[redacted]``) from stdout, ``stderr_tail``
  and every exception message; a cut made for the output bounds never leaves
  a piece of a secret (see `wardd.adapters._redact`).
- The environment is exactly: ``PATH`` (the daemon's, or
  ``/usr/local/bin:/usr/bin:/bin``), ``LANG`` and ``HOME`` when the daemon
  has them (``HOME`` falls back to the passwd entry), the configured ``env``
  (which may override those three), then ``WARDD_OP``, ``WARDD_ATTEMPT``,
  ``WARDD_ACT``, ``WARDD_IDEMPOTENCY_KEY`` and ``WARDD_BOOT`` (the boot of
  the daemon that claimed the call: with the key, it tells a later start
  of the same database that a program left running is its own orphan, not
  another daemon's program; see `wardd.daemon.life.orphans`), and with tracing
  on, ``TRACEPARENT`` and ``TRACESTATE`` (the dispatch span's W3C trace
  context). ``env`` may not name
  ``WARDD_*``, ``NOTIFY_SOCKET`` or ``LISTEN_*``. The working directory is the
  daemon's.
- At the end of **every** call, not only at shutdown, the program's whole
  process group is SIGKILLed: a background child left behind by the program
  could otherwise still have an effect after the attempt's outcome was
  recorded. A tool that must leave a daemon running has to leave the group
  itself (``setsid``), and then it is no longer fenced by wardd.
- `CliAdapter.kill_all` (shutdown) kills every group and also ends the
  adapter's life: calls after it fail with `DefiniteFailure` (nothing is
  started) and receipts answer ``unknown``.
- The receipt program gets the idempotency key as its last argument, the
  same environment (``WARDD_ACT``, ``WARDD_IDEMPOTENCY_KEY``, and
  ``WARDD_OP``/``WARDD_ATTEMPT`` taken from the key; no ``WARDD_BOOT``, and
  ``WARDD_RECEIPT=1``: a receipt run has no effect to fence, so it is never
  an orphan, even one with the key and no boot), ``/dev/null`` as
  stdin and 30 s; only exit 0 with a first stdout line of ``executed``,
  ``not_executed`` or ``unknown`` counts, anything else is ``unknown``.
"""

from __future__ import annotations

import os
import pwd
import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Self

import attrs

from . import _config, _process, _redact
from ._base import (
    ActRequest,
    Adapter,
    AdapterConfigError,
    BaseAdapter,
    CallAborted,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
    ReceiptAnswer,
)
from ._config import SecretFile

_KEYS = ("adapter", "argv", "max_arg_bytes", "no_effect_exits", "timeout_s", "env", "receipt_argv")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
STDERR_TAIL_BYTES = 4096
FRAME_RESERVE = 65536  # room left in a frame beside stdout: stdout is bounded to max_frame - 64 KiB
RECEIPT_TIMEOUT_S = 30.0
RECEIPT_STDOUT_BYTES = 4096
_MESSAGE_TAIL_CHARS = 256
_RECEIPT_WORDS: dict[bytes, ReceiptAnswer] = {
    b"executed": "executed",
    b"not_executed": "not_executed",
    b"unknown": "unknown",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def read_env_secret(name: str, secret: SecretFile) -> bytes:
    """The ``env`` value ``name`` from its secret file; `DefiniteFailure` when unusable."""
    try:
        return secret.read()
    except OSError as exc:
        raise DefiniteFailure(
            f"cannot read the secret file for {name} ({secret.path}): {exc.strerror}"
        ) from exc
    except ValueError as exc:
        raise DefiniteFailure(f"the secret file for {name} ({secret.path}) {exc}") from None


EnvValue = str | SecretFile


def _parse_env(value: object) -> tuple[tuple[str, EnvValue], ...]:
    if not isinstance(value, Mapping):
        raise AdapterConfigError("env", "must be a table of NAME = string or {file = path}")
    items: list[tuple[str, EnvValue]] = []
    for name in sorted(value):
        key = f"env.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise AdapterConfigError(key, "is not a valid environment variable name")
        if name.startswith("WARDD_") or name == "NOTIFY_SOCKET" or name.startswith("LISTEN_"):
            raise AdapterConfigError(key, "is reserved (WARDD_*, NOTIFY_SOCKET, LISTEN_*)")
        items.append((name, _parse_env_value(value[name], key)))
    return tuple(items)


def _parse_env_value(value: object, key: str) -> EnvValue:
    if isinstance(value, str):
        if "\0" in value:
            raise AdapterConfigError(key, "must not contain a NUL character")
        return value
    if isinstance(value, Mapping):
        for inner in sorted(value):
            if inner != "file":
                raise AdapterConfigError(f"{key}.{inner}", "unknown key")
        if "file" not in value:
            raise AdapterConfigError(f"{key}.file", "missing (the secret file's absolute path)")
        return SecretFile(_config.absolute_path(value["file"], f"{key}.file"))
    raise AdapterConfigError(key, 'must be a string or a table {file = "/path"}')


def _base_environment() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH") or DEFAULT_PATH}
    if os.environ.get("LANG"):
        env["LANG"] = os.environ["LANG"]
    home = os.environ.get("HOME")
    if not home:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = None
    if home:
        env["HOME"] = home
    return env


@attrs.frozen
class CliSettings:
    """A ``cli`` act's table, validated (the module docstring names its keys)."""

    tag: str
    argv: tuple[str, ...]
    max_arg_bytes: int
    stdout_limit: int
    no_effect_exits: frozenset[int] = frozenset()
    timeout_s: float | None = None
    env: tuple[tuple[str, EnvValue], ...] = ()
    receipt_argv: tuple[str, ...] | None = None

    @classmethod
    def from_table(cls, tag: str, table: Mapping[str, Any], *, max_frame: int) -> Self:
        """Validate the act's table; raises `AdapterConfigError`."""
        _config.refuse_unknown_keys(table, _KEYS)
        if "argv" not in table:
            raise AdapterConfigError("argv", "missing (a non-empty list of strings is required)")
        timeout = table.get("timeout_s")
        receipt_argv = table.get("receipt_argv")
        return cls(
            tag=tag,
            argv=_config.argv(table["argv"], "argv"),
            max_arg_bytes=_config.max_arg_bytes(table, max_frame=max_frame),
            stdout_limit=max_frame - FRAME_RESERVE,
            no_effect_exits=_config.exit_codes(table.get("no_effect_exits", []), "no_effect_exits"),
            timeout_s=None if timeout is None else _config.positive_seconds(timeout, "timeout_s"),
            env=_parse_env(table.get("env", {})),
            receipt_argv=None
            if receipt_argv is None
            else _config.argv(receipt_argv, "receipt_argv"),
        )

    def build(self, boot: str | None = None) -> Adapter:
        """The act's adapter, from these settings."""
        return _config.adapter_from(CliAdapter, self)


@attrs.define(eq=False)
class CliAdapter(BaseAdapter, CliSettings):
    """Runs ``argv`` once per call, args on stdin; out of process, optional receipt."""

    kind: str = attrs.field(default="cli", init=False)
    abortable: bool = attrs.field(default=True, init=False)
    _groups: _process.ProcessGroups = attrs.field(factory=_process.ProcessGroups, init=False)
    _base_env: dict[str, str] = attrs.field(factory=_base_environment, init=False)

    @property
    def receipt_supported(self) -> bool:
        """A receipt is offered only when ``receipt_argv`` is configured."""
        return self.receipt_argv is not None

    def kill_all(self) -> None:
        """SIGKILL every process group this adapter runs; refuse new calls from now on."""
        self._groups.kill_all()

    def abort(self, idempotency_key: str) -> None:
        """SIGKILL the process group of the call for ``idempotency_key`` (the
        operator's ``abort``); a call whose program is still starting is
        killed as soon as it exists. The call then ends unknown: with
        `CallAborted` when the kill ended its program (or it never started),
        with its own end when its program had already exited."""
        self._groups.abort(idempotency_key)

    def call(self, request: ActRequest) -> dict[str, Any]:
        """Run the program once for ``request`` (see the module docstring for outcomes)."""
        if len(request.args) > self.max_arg_bytes:
            raise DefiniteFailure(f"args of {len(request.args)} bytes exceed {self.max_arg_bytes}")
        env, secrets = self._environment(
            op=request.op,
            attempt=str(request.attempt),
            act=request.act,
            key=request.idempotency_key,
            boot=request.boot,
        )
        # the dispatch span's W3C trace context (docs/operations.md, "Traces")
        trace = {"TRACEPARENT": request.traceparent, "TRACESTATE": request.tracestate}
        env.update({k: v for k, v in trace.items() if v is not None})
        margin = _redact.longest(secrets)
        try:
            done = _process.run(
                self._groups,
                self.argv,
                env,
                request.args,
                timeout_s=self.timeout_s,
                stdout_head=self.stdout_limit + margin,
                stderr_tail=STDERR_TAIL_BYTES + margin,
                key=request.idempotency_key,
            )
        except DefiniteFailure as exc:
            raise DefiniteFailure(_redact.redact_text(str(exc), secrets)) from None
        except CallAborted:
            raise  # aborted before its program started (a fixed text, no secret)
        except Exception as exc:  # noqa: BLE001 - any failure after the start may follow the effect: unknown
            # Not chained: only the redacted text of the cause may travel on.
            message = _redact.redact_text(f"{type(exc).__name__}: {exc}", secrets)
            raise OutcomeUnknown(f"{self.tag}: the run failed ({message})") from None
        return self._judge(done, secrets)

    def _judge(self, done: _process.Finished, secrets: Sequence[bytes]) -> dict[str, Any]:
        stdout, truncated = _bounded_stdout(done, secrets, self.stdout_limit)
        stderr_tail = _stderr_text(done, secrets)
        said = f"; stderr: {stderr_tail[-_MESSAGE_TAIL_CHARS:]!r}" if stderr_tail else ""
        if done.aborted:  # the operator's abort killed it (contract §3.8)
            raise CallAborted(f"{self.tag}: killed by the operator's abort{said}")
        if done.timed_out:
            raise OutcomeUnknown(
                f"{self.tag}: timed out after {self.timeout_s:g} s; process group killed{said}"
            )
        code = done.returncode
        if code < 0:
            raise OutcomeUnknown(f"{self.tag}: killed by {_signal_name(-code)}{said}")
        if code in self.no_effect_exits:
            raise DefiniteFailure(f"{self.tag}: exit status {code} (a no-effect exit){said}")
        if code != 0:
            raise OutcomeUnknown(f"{self.tag}: exit status {code}{said}")
        return {"stdout": stdout, "stderr_tail": stderr_tail, "truncated": truncated}

    def answer(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """Ask ``receipt_argv + [idempotency_key]``; never raises (failure is ``unknown``)."""
        if self.receipt_argv is None:
            return Receipt("unknown", detail="no receipt_argv configured")
        parts = idempotency_key.split("/")
        op, attempt = (parts[1], parts[2]) if len(parts) == 3 else (None, None)
        secrets: list[bytes] = []
        try:
            env, secrets = self._environment(
                op=op, attempt=attempt, act=self.tag, key=idempotency_key, receipt=True
            )
            done = _process.run(
                self._groups,
                (*self.receipt_argv, idempotency_key),
                env,
                None,
                timeout_s=RECEIPT_TIMEOUT_S,
                stdout_head=RECEIPT_STDOUT_BYTES,
                stderr_tail=_MESSAGE_TAIL_CHARS + _redact.longest(secrets),
            )
        except Exception as exc:  # noqa: BLE001 - a receipt that cannot run answers unknown
            reason = _redact.redact_text(f"{type(exc).__name__}: {exc}", secrets)
            return Receipt("unknown", detail=f"receipt run failed ({reason})")
        if done.timed_out or done.returncode != 0:
            how = "timed out" if done.timed_out else f"exit status {done.returncode}"
            tail = _stderr_text(done, secrets, _MESSAGE_TAIL_CHARS)
            said = f"; stderr: {tail!r}" if tail else ""
            return Receipt("unknown", detail=f"receipt program: {how}{said}")
        first = done.stdout_head.split(b"\n", 1)[0].strip()
        answer = _RECEIPT_WORDS.get(first)
        if answer is not None:
            return Receipt(answer)
        return Receipt("unknown", detail="receipt program gave no recognised answer")

    def _environment(
        self,
        *,
        op: str | None,
        attempt: str | None,
        act: str,
        key: str,
        boot: str | None = None,
        receipt: bool = False,
    ) -> tuple[dict[str, str | bytes], list[bytes]]:
        """The child's whole environment and the secret values in it (read now)."""
        env: dict[str, str | bytes] = dict(self._base_env)
        secrets: list[bytes] = []
        for name, value in self.env:
            if isinstance(value, SecretFile):
                secret = read_env_secret(name, value)
                env[name] = secret
                if secret:
                    secrets.append(secret)
            else:
                env[name] = value
        wardd = {"WARDD_OP": op, "WARDD_ATTEMPT": attempt, "WARDD_ACT": act}
        env.update({k: v for k, v in wardd.items() if v is not None})
        env["WARDD_IDEMPOTENCY_KEY"] = key
        if boot is not None:
            env["WARDD_BOOT"] = boot
        if receipt:
            env["WARDD_RECEIPT"] = "1"
        return env, secrets


def _bounded_stdout(
    done: _process.Finished, secrets: Sequence[bytes], limit: int
) -> tuple[bytes, bool]:
    truncated = done.stdout_total > limit
    end = min(len(done.stdout_head), limit)
    stdout = _redact.redact_window(done.stdout_head, secrets, 0, end)
    if len(stdout) > limit:  # markers longer than the secrets they replace
        stdout, truncated = stdout[:limit], True
    return stdout, truncated


def _stderr_text(
    done: _process.Finished, secrets: Sequence[bytes], shown: int = STDERR_TAIL_BYTES
) -> str:
    # The raw tail holds up to the longest secret's length more than is shown, so an
    # occurrence crossing the cut is whole in it and is widened to one marker.
    raw = done.stderr_tail
    start = max(0, len(raw) - shown)
    return _redact.redact_window(raw, secrets, start).decode("utf-8", "replace")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
