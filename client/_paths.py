"""Default locations (contract §4, §6).

`default_socket_path` (`wardd.protocol`'s, the one the daemon binds) and
`default_key_path` are the XDG defaults. The clients and wardctl look at the environment first
(`socket_path`, `key_path`): ``$WARDD_SOCKET`` and ``$WARDD_KEY``.
"""

from __future__ import annotations

import os
from pathlib import Path

from wardd.protocol import default_socket_path

__all__ = ["default_key_path", "default_socket_path", "key_path", "socket_path"]


def default_key_path() -> str:
    """The default neuron key file: ``$XDG_CONFIG_HOME/wardd/neuron.key``.

    ``XDG_CONFIG_HOME`` defaults to ``~/.config`` (XDG base directories).
    """
    config = os.environ.get("XDG_CONFIG_HOME")
    base = Path(config) if config and os.path.isabs(config) else Path.home() / ".config"
    return str(base / "wardd" / "neuron.key")


def socket_path() -> str:
    """The socket a client uses when none is named: ``$WARDD_SOCKET``, else the default."""
    return os.environ.get("WARDD_SOCKET") or default_socket_path()


def key_path() -> str:
    """The key file wardctl uses when none is named: ``$WARDD_KEY``, else the default."""
    return os.environ.get("WARDD_KEY") or default_key_path()
