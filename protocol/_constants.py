"""Protocol constants (contract §4)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_MAX_FRAME",
    "MAX_DEPTH",
    "MAX_MAX_FRAME",
    "MIN_MAX_FRAME",
    "PROTOCOL_VERSION",
    "SIGNING_DOMAIN",
]

#: The one wire protocol version this code speaks (`hello {protocol: 1}`).
PROTOCOL_VERSION: Final = 1
#: First element of every signing input: ``["wardd/1", network, method, params]``.
SIGNING_DOMAIN: Final = "wardd/1"
#: Default bound on a frame's body length N (1 MiB, contract §4 and §6 `max_frame`).
DEFAULT_MAX_FRAME: Final = 1 << 20
#: The smallest `max_frame` a configuration may set (contract §6). Not enforced by
#: `FrameDecoder`, which accepts any bound >= 1.
MIN_MAX_FRAME: Final = 131072
#: The largest `max_frame` a configuration may set (contract §6: 1 GiB).
MAX_MAX_FRAME: Final = 1 << 30
#: Deepest container nesting a frame may hold; the top-level item is depth 1.
MAX_DEPTH: Final = 64
