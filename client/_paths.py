"""Default locations, the same ones the daemon uses (SPEC §4, §6)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_key_path", "default_socket_path"]


def default_socket_path() -> str:
    """The socket the client talks to when none is named.

    ``$WARDD_SOCKET`` if set, else ``$XDG_RUNTIME_DIR/wardd/wardd.sock``; with
    no (absolute) ``XDG_RUNTIME_DIR`` it falls back to the same per-user
    directory the daemon falls back to, ``/tmp/wardd-<uid>/wardd/wardd.sock``.
    """
    explicit = os.environ.get("WARDD_SOCKET")
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = (
        Path(runtime) if runtime and os.path.isabs(runtime) else Path(f"/tmp/wardd-{os.getuid()}")
    )
    return str(base / "wardd" / "wardd.sock")


def default_key_path() -> str:
    """The neuron key file used when none is named.

    ``$WARDD_KEY`` if set, else ``$XDG_CONFIG_HOME/wardd/neuron.key`` (with
    ``XDG_CONFIG_HOME`` defaulting to ``~/.config``, per the XDG base
    directory specification).
    """
    explicit = os.environ.get("WARDD_KEY")
    if explicit:
        return explicit
    config = os.environ.get("XDG_CONFIG_HOME")
    base = Path(config) if config and os.path.isabs(config) else Path.home() / ".config"
    return str(base / "wardd" / "neuron.key")
