"""wardd.client: talk to a wardd daemon (contract §4).

- `Client`: a blocking connection over the daemon's Unix socket;
  `TrioClient`: its trio twin, safe for concurrent calls from many tasks.
  Both run `hello` on connect, and raise the `wardd.protocol.WarddError`
  subclass of the daemon's error code when it refuses a request.
- `Neuron`: an Ed25519 signing subject (`generate`, `load`, `save`, `sign`).
- `Session` / `TrioSession`: signed calls for one neuron, reading the
  compare-and-set values they need from the daemon unless given.
- `ClientCore`: the sans-IO connection core both clients share.
- `wardctl`: the operator command line (`wardd.client.wardctl:main`).
"""

from __future__ import annotations

from ._core import ClientCore, HelloResult, result_of
from ._errors import (
    ClientError,
    ConnectionClosed,
    FrameTooLarge,
    KeyFileError,
    RemoteProtocolError,
)
from ._neuron import Neuron
from ._paths import default_key_path, default_socket_path
from ._session import NO_VALUE, Session, TrioSession
from ._sync import Client
from ._trio import TrioClient

__all__ = [
    "NO_VALUE",
    "Client",
    "ClientCore",
    "ClientError",
    "ConnectionClosed",
    "FrameTooLarge",
    "HelloResult",
    "KeyFileError",
    "Neuron",
    "RemoteProtocolError",
    "Session",
    "TrioClient",
    "TrioSession",
    "default_key_path",
    "default_socket_path",
    "result_of",
]
