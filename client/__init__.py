"""wardd.client: talk to a wardd daemon (contract §4).

- `Client`: a blocking connection over the daemon's Unix socket;
  `AsyncClient`: its async twin on anyio, for asyncio and trio alike, safe
  for concurrent calls from many tasks. Both run `hello` on connect, and
  raise the `wardd.protocol.WarddError` subclass of the daemon's error code
  when it refuses a request.
- `Neuron`: an Ed25519 signing subject (`generate`, `load`, `save`, `sign`).
- `Session` / `AsyncSession`: signed calls for one neuron, reading the
  compare-and-set values they need from the daemon unless given (the
  blocking `Session` is generated from `AsyncSession`: `_unasync.py`).
- `TrioClient` / `TrioSession`: the same classes as `AsyncClient` /
  `AsyncSession`, under the names they had when the client ran on trio only.
- `ClientCore`: the sans-IO connection core both clients share.
- `wardctl`: the operator command line (`wardd.client.wardctl:main`).
"""

from __future__ import annotations

from ._async import AsyncClient
from ._async_session import AsyncSession
from ._core import ClientCore, HelloResult, result_of
from ._errors import (
    ClientError,
    ConnectionClosed,
    FrameTooLarge,
    KeyFileError,
    MayHaveRun,
    RemoteProtocolError,
)
from ._neuron import Neuron
from ._paths import default_key_path, default_socket_path
from ._session import NO_VALUE, Retry
from ._sync import Client
from ._sync_session import Session

TrioClient = AsyncClient
TrioSession = AsyncSession

__all__ = [
    "NO_VALUE",
    "AsyncClient",
    "AsyncSession",
    "Client",
    "ClientCore",
    "ClientError",
    "ConnectionClosed",
    "FrameTooLarge",
    "HelloResult",
    "KeyFileError",
    "MayHaveRun",
    "Neuron",
    "RemoteProtocolError",
    "Retry",
    "Session",
    "TrioClient",
    "TrioSession",
    "default_key_path",
    "default_socket_path",
    "result_of",
]
