"""wardctl's scripted peer for unit tests: a thread that answers one request at
a time from a dict, on a real Unix socket, and a `run` that calls wardctl's main."""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.unit._client_peer import HELLO
from wardd.client.wardctl import build_parser, main
from wardd.protocol import FrameDecoder, WarddError, encode_frame


def command_paths(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command and sub-command of the parser, as argv prefixes."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from command_paths(sub, (*prefix, name))


ALL_COMMANDS = sorted(set(command_paths(build_parser())))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


Answer = Callable[[dict[str, Any]], Any]
#: An answer that closes the connection instead of replying (the answer is lost).
HANG_UP: Any = object()


@pytest.fixture
def daemon_stub() -> Iterator[Callable[[dict[str, Any]], tuple[str, list[dict[str, Any]]]]]:
    """`daemon_stub({method: result | WarddError | callable | HANG_UP})` → (socket path,
    requests seen)."""
    stop: list[Callable[[], None]] = []

    def start(answers: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        tmp = tempfile.mkdtemp(prefix="wc-", dir="/tmp")
        path = os.path.join(tmp, "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(4)
        seen: list[dict[str, Any]] = []

        def serve_one(conn: socket.socket) -> None:
            decoder = FrameDecoder()
            with conn:
                while True:
                    item = decoder.next_item()
                    if not isinstance(item, dict):
                        data = conn.recv(65536)
                        if not data:
                            return
                        decoder.feed(data)
                        continue
                    seen.append(item)
                    answer = HELLO if item["method"] == "hello" else answers[item["method"]]
                    if answer is HANG_UP:
                        return
                    if callable(answer) and not isinstance(answer, WarddError):
                        answer = answer(item["params"])
                    if isinstance(answer, WarddError):
                        reply = {"id": item["id"], "error": answer.to_wire()}
                    else:
                        reply = {"id": item["id"], "result": answer}
                    conn.sendall(encode_frame(reply))

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                serve_one(conn)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()

        def close() -> None:
            listener.shutdown(socket.SHUT_RDWR)
            listener.close()
            thread.join(5)
            os.unlink(path)
            os.rmdir(tmp)

        stop.append(close)
        return path, seen

    yield start
    for close in stop:
        close()
