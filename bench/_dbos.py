"""The DBOS peer's environment: a venv of its own (``bench/.venv-dbos``),
created on demand with ``pip install dbos``; never the project's venv.

``ensure_venv`` returns the venv's python, or None (with the reason) when
DBOS cannot be installed here; the bench then skips the peer and says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-dbos"
PIN = "dbos==3.4.0"  # the version of the reference measurements; unpinned if it cannot be had
STAMP = VENV / ".installed"


def ensure_venv(log: Any) -> tuple[Path | None, str]:
    py = VENV / "bin" / "python"
    if STAMP.exists() and py.exists():
        return py, "present"
    log(f"creating {VENV} and installing DBOS Transact (once)")
    try:
        if not py.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(VENV)],
                check=True,
                capture_output=True,
                timeout=300,
            )
        for spec in (PIN, "dbos"):
            r = subprocess.run(
                [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", spec],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if r.returncode == 0:
                STAMP.write_text(spec + "\n")
                return py, f"installed {spec}"
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return None, "pip install dbos failed: " + " | ".join(tail)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not create the DBOS venv: {exc}"


def run_peer(
    py: Path, root: Path, *, steps: int, workflows: int, reps: int, journal: str
) -> dict[str, Any]:
    r = subprocess.run(
        [
            str(py),
            str(HERE / "_dbos_peer.py"),
            str(root),
            str(steps),
            str(workflows),
            str(reps),
            journal,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if r.returncode != 0:
        raise RuntimeError("the DBOS peer failed:\n" + r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


class Peer:
    """A DBOS peer process kept alive between repetitions (``serve`` mode)."""

    def __init__(self, py: Path, root: Path, journal: str = "wal") -> None:
        self.proc = subprocess.Popen(
            [str(py), str(HERE / "_dbos_peer.py"), str(root), "serve", journal],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise RuntimeError("the DBOS peer did not start: " + self._stderr())

    def _stderr(self) -> str:
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            return ""
        return (err or "")[-2000:]

    def rep(self, steps: int, workflows: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"rep {steps} {workflows}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the DBOS peer died: " + self._stderr())
        return json.loads(line)

    def close(self) -> dict[str, Any] | None:
        """Stop the peer; its final line (journal mode, version) if it gave one."""
        out = None
        if self.proc.poll() is None:
            try:
                stdout, _ = self.proc.communicate("quit\n", timeout=60)
                lines = stdout.strip().splitlines()
                out = json.loads(lines[-1]) if lines else None
            except (subprocess.TimeoutExpired, ValueError):
                self.proc.kill()
                self.proc.wait()
        return out
