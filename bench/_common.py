"""Shared helpers of the benchmarks: statistics, timing, output, temp dirs.

Every figure is a list of samples (one per repetition) summarised as
median [min–max]; latencies are pooled over the repetitions and summarised
as p50/p99. Nothing here talks to anything but local files.
"""

from __future__ import annotations

import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "Results",
    "Stat",
    "bench_tmp",
    "fmt_rate",
    "log",
    "percentile",
    "raise_nofile",
    "rss_kib",
    "section",
]

T0 = time.monotonic()


def log(msg: str) -> None:
    """Progress on stderr (the figures go to stdout)."""
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted samples."""
    if not samples:
        return math.nan
    s = sorted(samples)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


class Stat:
    """Samples of one figure over the repetitions: median [min–max]."""

    def __init__(self, samples: Iterable[float], unit: str = "/s") -> None:
        self.samples = [float(x) for x in samples]
        self.unit = unit

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    @property
    def min(self) -> float:
        return min(self.samples) if self.samples else math.nan

    @property
    def max(self) -> float:
        return max(self.samples) if self.samples else math.nan

    def __str__(self) -> str:
        if not self.samples:
            return "n/a"
        return (
            f"{fmt_rate(self.median)}{self.unit}  [{fmt_rate(self.min)}–"
            f"{fmt_rate(self.max)}, n={len(self.samples)}]"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "n": len(self.samples),
            "unit": self.unit,
            "samples": self.samples,
        }


def fmt_rate(x: float) -> str:
    if x != x:  # nan
        return "n/a"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_ms(seconds: float) -> str:
    return "n/a" if seconds != seconds else f"{seconds * 1000:.2f} ms"


class Results:
    """Every figure of one run, keyed by a dotted name, for the summary and --json."""

    def __init__(self) -> None:
        self.stats: dict[str, Stat] = {}
        self.values: dict[str, Any] = {}
        self.notes: list[str] = []

    def stat(self, key: str, samples: Iterable[float], unit: str = "/s") -> Stat:
        s = self.stats[key] = Stat(samples, unit)
        return s

    def value(self, key: str, v: Any) -> Any:
        self.values[key] = v
        return v

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"   note: {text}", flush=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stats": {k: s.as_dict() for k, s in self.stats.items()},
            "values": self.values,
            "notes": self.notes,
        }


def raise_nofile(want: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class bench_tmp:
    """A temp dir for one run, removed at the end whatever happens."""

    def __init__(self, base: str | None) -> None:
        self.base = base

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix="wardd-bench-", dir=self.base))
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def same_fs(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def machine_info() -> dict[str, Any]:
    import platform
    import sqlite3

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        info["loadavg"] = os.getloadavg()
    except OSError:
        pass
    return info
