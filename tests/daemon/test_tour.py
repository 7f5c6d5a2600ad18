"""The README's five-minute tour, as a user pastes it: real wardctl processes
against a real daemon."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.daemon.harness import Env


def wardctl(env: Env, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "WARDD_SOCKET": str(env.socket), "WARDD_KEY": str(env.root / "neuron.key")}
    out = subprocess.run(
        [sys.executable, "-m", "wardd.client.wardctl", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=60,
    )
    if check:
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


def test_readme_tour(make_daemon):
    env = Env(network="local")
    env.acts["tool.run"] = {
        "adapter": "cli",
        "argv": ["/bin/sh", "-c", 'cat; echo " ran as $WARDD_IDEMPOTENCY_KEY"'],
    }
    env.write_config()
    make_daemon(env)
    assert "workers:" in wardctl(env, "status").stdout
    neuron = wardctl(env, "keygen").stdout.strip().splitlines()[-1]
    assert len(neuron) == 64
    wardctl(env, "register")
    wardctl(env, "prog", "create", "notes", "--steps", "1000")
    wardctl(env, "grant", "notes", "echo", "tool.run")
    wardctl(env, "bind", "--worker", "w0")
    wardctl(env, "submit", "notes", "op-1", "echo", "--args", "hello")
    assert "succeeded" in wardctl(env, "invoke", "op-1").stdout
    assert "retained" in wardctl(env, "op", "show", "op-1").stdout
    hist = wardctl(env, "history", "op-1").stdout
    for kind in ("submitted", "prepared", "claimed", "outcome"):
        assert kind in hist
    assert "hello" in wardctl(env, "consume", "op-1").stdout
    first = wardctl(env, "call", "notes", "op-3", "echo", "--args", "hi").stdout
    assert first.startswith("op op-3 attempt 1: succeeded") and "hi" in first
    again = wardctl(env, "call", "notes", "op-3", "echo", "--args", "hi").stdout
    assert "(already; the op is retained: nothing ran again)" in again and "hi" in again
    wardctl(env, "submit", "notes", "op-2", "tool.run", "--args", "input on stdin")
    out = wardctl(env, "invoke", "op-2").stdout
    assert f"input on stdin ran as {neuron}/op-2/1" in out
    assert "no unknown operations" in wardctl(env, "ops", "--state", "unknown").stdout
    refused = wardctl(env, "consume", "op-1", check=False)
    assert refused.returncode == 1 and "terminal" in refused.stderr
