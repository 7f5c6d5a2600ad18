"""wardctl as a real process, for daemon tests: run it against an Env's socket and key."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.daemon.harness import Env


def environ(env: Env) -> dict[str, str]:
    return {
        **os.environ,
        "WARDD_SOCKET": str(env.socket),
        "WARDD_KEY": str(env.root / "neuron.key"),
    }


def wardctl(env: Env, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "wardd.client.wardctl", *args],
        capture_output=True,
        text=True,
        env=environ(env),
        timeout=60,
    )
    if check:
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


def set_up(env: Env, acts: str = "gated") -> None:
    wardctl(env, "keygen")
    wardctl(env, "register")
    wardctl(env, "prog", "create", "p", "--steps", "100")
    wardctl(env, "grant", "p", *acts.split())
    wardctl(env, "bind", "--worker", "w0")
