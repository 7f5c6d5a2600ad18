"""The daemon's log lines: structlog to stderr, as JSON or text, with the
journal's priority prefix when stderr is journald's stream.

Under systemd, stderr is a stream to journald whose device and inode
``JOURNAL_STREAM`` names (systemd.exec(5)). A line that starts with
``<N>`` is then stored at syslog priority N (sd-daemon(3)), so that
``journalctl -p warning`` shows the warnings and errors only; without the
prefix every line would be stored at info. Each line of a multi-line
entry (a text traceback) gets the prefix, since journald reads each line
as an entry of its own.

``log_format``: ``json`` (one object per line), ``text`` (structlog's
console lines: time, level, event, then the same fields as key=value), or
``auto`` (text when stderr is a terminal, JSON otherwise).
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import structlog

__all__ = [
    "PRIORITY",
    "StderrLogger",
    "configure_logging",
    "journald_stream",
    "log_lines",
    "render_direct",
]

#: sd-daemon(3) priority of each level (syslog's: 2 crit, 3 err, 4 warning, 6 info, 7 debug).
PRIORITY: Final = {
    "debug": 7,
    "info": 6,
    "warning": 4,
    "error": 3,
    "critical": 2,
}
_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
Renderer = Callable[[Any, str, Any], Any]  # structlog's last processor: a str here


class StderrLogger:
    """structlog's output: one line per event on stderr (fd 2), in one
    ``write`` per line where the kernel allows.

    A line that cannot be written (the terminal was closed and hung up, the
    reading end of a pipe is gone, the journal's stream is full) is dropped:
    a lost log line must never stop the daemon in the middle of its work or
    of its stop path. (``print`` to ``sys.stderr`` would raise ``OSError``
    there, and keep the unwritten bytes in its buffer.)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def msg(self, message: str) -> None:
        data = (message + "\n").encode("utf-8", "replace")
        with self._lock:
            try:
                while data:
                    data = data[os.write(2, data) :]
            except OSError:
                pass

    debug = info = warning = warn = error = err = critical = fatal = exception = msg
    failure = log = msg


_STDERR = StderrLogger()


def _stderr_logger(*args: Any) -> StderrLogger:
    return _STDERR


def journald_stream(environ: Mapping[str, str], fd: int = 2) -> bool:
    """Whether ``fd`` is the stream ``JOURNAL_STREAM`` (``<dev>:<ino>``, decimal) names."""
    value = environ.get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def _prefixed(render: Renderer) -> Renderer:
    """``render``, each of its lines behind the ``<N>`` of the event's level."""

    def prefixed(logger: Any, method: str, event_dict: Any) -> str:
        n = PRIORITY.get(event_dict.get("level", method), PRIORITY["info"])
        text = render(logger, method, event_dict)
        return "\n".join(f"<{n}>{line}" for line in text.split("\n"))

    return prefixed


def _renderer(fmt: str, environ: Mapping[str, str]) -> Renderer:
    tty = os.isatty(2)
    text = fmt == "text" or (fmt == "auto" and tty)
    render: Renderer
    if text:
        render = structlog.dev.ConsoleRenderer(colors=tty)
    else:
        render = structlog.processors.JSONRenderer(sort_keys=False)
    return _prefixed(render) if journald_stream(environ) else render


_render: list[Renderer] = [structlog.processors.JSONRenderer(sort_keys=False)]


def configure_logging(
    level: str = "info", fmt: str = "auto", environ: Mapping[str, str] | None = None
) -> None:
    """structlog lines on stderr: ISO UTC time, level, event name, in ``fmt``;
    below ``level`` dropped; prefixed by their priority under journald."""
    _render[0] = render = _renderer(fmt, os.environ if environ is None else environ)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )


def render_direct(level: str, event_dict: dict[str, Any]) -> str:
    """One line as the configured renderer writes it, for a line that must be
    written without structlog (from a signal handler): ``event_dict`` holds
    ``event``, ``timestamp`` and the fields; ``level`` is added."""
    return str(_render[0](None, level, {**event_dict, "level": level}))


def log_lines(
    logger: Any, level: str, event: str, items: Iterable[Mapping[str, Any]], chunk: int = 512
) -> None:
    """One line of ``event`` per item, each as ``logger`` would write it
    (its level filter, the configured renderer, the same fields in the same
    order), with one timestamp and a few ``write`` calls for them all: the
    start's recovery writes a line per attempt it marks, thousands after a
    crash, before ``READY=1``, and one line through structlog costs ~15 µs."""
    if not logger.is_enabled_for(_LEVELS[level]):
        return
    at = datetime.datetime.now(tz=datetime.UTC).isoformat().replace("+00:00", "Z")
    render, lines = _render[0], []
    for item in items:
        fields = {**item, "event": event, "level": level, "timestamp": at}
        lines.append(str(render(None, level, fields)))
        if len(lines) == chunk:
            _STDERR.msg("\n".join(lines))
            lines.clear()
    if lines:
        _STDERR.msg("\n".join(lines))
