"""wardd.client: talk to a wardd daemon (contract §4); the manual is docs/client.md.

- `Client`: a blocking connection over the daemon's Unix socket;
  `AsyncClient`: its async twin on anyio, for asyncio and trio alike, safe
  for concurrent calls from many tasks. Both run `hello` on connect, and
  raise the `wardd.protocol.WarddError` subclass of the daemon's error code
  when it refuses a request.
- `Neuron`: an Ed25519 signing subject (`generate`, `load`, `save`, `sign`).
- `Session` / `AsyncSession`: signed calls for one neuron, reading the
  compare-and-set values they need from the daemon unless given (the
  blocking `Session` is generated from `AsyncSession`: `_unasync.py`).
  Each returns a frozen record (`Operation`, `Dispatched`, `Status`, a
  `Page` of listings, ...) with the protocol's `StrEnum` states and
  ``to_wire()`` for the raw map. `Retry` says when `invoke` asks again.
- `GuardedTool`: an agent framework's tool whose every run is one `call`
  keyed by the caller (`arguments_key`, `canonical_arguments`).
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
    ActFailed,
    ClientError,
    ConnectionClosed,
    DaemonUnreachable,
    DispatchTimedOut,
    FrameTooLarge,
    KeyFileError,
    MayHaveRun,
    NotSent,
    RemoteProtocolError,
)
from ._neuron import Neuron
from ._paths import default_key_path, default_socket_path
from ._results import (
    Aborted,
    Attempt,
    Called,
    Cancelled,
    Consumed,
    Dispatched,
    EpochChanged,
    GrantChanged,
    HistoryRecord,
    ListedAttempt,
    ManualTaken,
    NeuronRoot,
    Operation,
    OperationSummary,
    Outcome,
    Page,
    PlacementChanged,
    Prepared,
    Prog,
    ProgCreated,
    ProgStateChanged,
    Rebound,
    ReceiptsChecked,
    Reconciled,
    Record,
    Registered,
    Released,
    Reservation,
    Status,
    StepLimitChanged,
    Submitted,
    Worker,
)
from ._session import NO_VALUE, Retry
from ._sync import Client
from ._sync_session import Session
from ._tools import GuardedTool, Key, arguments_key, canonical_arguments

TrioClient = AsyncClient
TrioSession = AsyncSession

__all__ = [
    "NO_VALUE",
    "Aborted",
    "ActFailed",
    "AsyncClient",
    "AsyncSession",
    "Attempt",
    "Called",
    "Cancelled",
    "Client",
    "ClientCore",
    "ClientError",
    "ConnectionClosed",
    "Consumed",
    "DaemonUnreachable",
    "DispatchTimedOut",
    "Dispatched",
    "EpochChanged",
    "FrameTooLarge",
    "GrantChanged",
    "GuardedTool",
    "HelloResult",
    "HistoryRecord",
    "Key",
    "KeyFileError",
    "ListedAttempt",
    "ManualTaken",
    "MayHaveRun",
    "Neuron",
    "NeuronRoot",
    "NotSent",
    "Operation",
    "OperationSummary",
    "Outcome",
    "Page",
    "PlacementChanged",
    "Prepared",
    "Prog",
    "ProgCreated",
    "ProgStateChanged",
    "Rebound",
    "ReceiptsChecked",
    "Reconciled",
    "Record",
    "Registered",
    "Released",
    "RemoteProtocolError",
    "Reservation",
    "Retry",
    "Session",
    "Status",
    "StepLimitChanged",
    "Submitted",
    "TrioClient",
    "TrioSession",
    "Worker",
    "arguments_key",
    "canonical_arguments",
    "default_key_path",
    "default_socket_path",
    "result_of",
]
