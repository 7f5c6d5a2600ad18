"""wardd.daemon: the daemon that owns the store and runs the acts (contract §3, §6).

The public surface:

- `main`: the ``wardd`` command (``run``, ``check-config``, ``--version``);
- `Config`, `load_config`, `parse_config`, `ConfigError`: the configuration
  file, validated into a frozen `Config` (docs/configuration.md);
- `Daemon`: one daemon for one `Config` (built in one step: the owner lock,
  the store, every component; then ``run`` under trio); `VERSION`: the
  installed wardd version.

Everything else (the writer, the units, the guard, the tokens, the workers,
recovery) is internal and may change without notice.

The names load on first use (PEP 562): ``wardd`` takes its signals over
before it imports the daemon's machinery (`wardd.daemon.cli`), and importing
this package must not undo that.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cli import main
    from .config import Config, ConfigError, load_config, parse_config
    from .life.app import VERSION, Daemon

__all__ = [
    "VERSION",
    "Config",
    "ConfigError",
    "Daemon",
    "load_config",
    "main",
    "parse_config",
]

_MODULE_OF = {
    "VERSION": "life.app",
    "Daemon": "life.app",
    "main": "cli",
    "Config": "config",
    "ConfigError": "config",
    "load_config": "config",
    "parse_config": "config",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
