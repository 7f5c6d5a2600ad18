"""Worker descriptors (contract §2) and the admission of a bound one (§3.1).

A descriptor pins the five execution-model selections (machine/ABI,
environment/ABI, proof, network, executor) and the bounds; it grants no
rights. This daemon advertises one per worker and per boot; a neuron can
bind only a descriptor equal to one advertised now.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import platform
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wardd.protocol import (
    BadRequest,
    PlacementStale,
    canonical_digest,
    is_uint,
)

from ..core.lookup import profile_refusal

__all__ = ["build_descriptors", "check_descriptor", "device_id", "machine_abi"]

_KEYS = {
    "v",
    "machine",
    "environment",
    "proof",
    "network",
    "executor",
    "acts",
    "max_arg_bytes",
    "act_bounds",
    "limits",
}
_EXECUTOR_KEYS = {"warrior", "version", "backend", "worker", "device", "boot"}
ENVIRONMENT = {"kind": "native-host", "abi": "wardd-hostact/1"}


def machine_abi() -> dict[str, str]:
    """The actual machine and C ABI of this process."""
    libc, _ = platform.libc_ver()
    abi = "linux-gnu" if libc == "glibc" else "linux-musl"
    return {"arch": platform.machine(), "abi": abi}


def device_id(database: Path, machine_id_path: str = "/etc/machine-id") -> str:
    """First 16 hex digits of HMAC-SHA256(key = machine id, msg = wardd-device/1).

    machine-id(5) asks for an application-specific hash: the raw id never
    appears anywhere. Without a machine id, a random id kept beside the
    database (``<db>.device``) is used."""
    try:
        key = Path(machine_id_path).read_text().strip()
    except OSError:
        key = ""
    if key:
        return hmac.new(key.encode(), b"wardd-device/1", hashlib.sha256).hexdigest()[:16]
    path = database.with_name(database.name + ".device")
    try:
        text = path.read_text().strip()
        if len(text) == 16:
            return text
    except OSError:
        pass
    value = secrets.token_hex(8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
        f.flush()
        os.fsync(f.fileno())
    return value


def build_descriptors(
    *,
    workers: int,
    network: str,
    version: str,
    device: str,
    boot: str,
    act_bounds: Mapping[str, int],
) -> list[dict[str, Any]]:
    acts = sorted(act_bounds)
    return [
        {
            "v": 1,
            "machine": machine_abi(),
            "environment": dict(ENVIRONMENT),
            "proof": "none",
            "network": network,
            "executor": {
                "warrior": "wardd",
                "version": version,
                "backend": "host-thread",
                "worker": f"w{i}",
                "device": device,
                "boot": boot,
            },
            "acts": acts,
            "max_arg_bytes": max(act_bounds.values()),
            "act_bounds": {a: act_bounds[a] for a in acts},
            "limits": {"cpu": None, "time": None, "memory": None},
        }
        for i in range(workers)
    ]


def well_formed(d: Any) -> bool:
    if not isinstance(d, dict) or set(d) != _KEYS or d.get("v") != 1 or isinstance(d["v"], bool):
        return False
    m, e, ex, lim = d["machine"], d["environment"], d["executor"], d["limits"]
    if not (
        isinstance(m, dict)
        and set(m) == {"arch", "abi"}
        and all(isinstance(x, str) for x in m.values())
    ):
        return False
    if not (
        isinstance(e, dict)
        and set(e) == {"kind", "abi"}
        and all(isinstance(x, str) for x in e.values())
    ):
        return False
    if not (
        isinstance(ex, dict)
        and set(ex) == _EXECUTOR_KEYS
        and all(isinstance(x, str) for x in ex.values())
    ):
        return False
    if not (isinstance(lim, dict) and set(lim) == {"cpu", "time", "memory"}):
        return False
    if not all(x is None or is_uint(x) or isinstance(x, float) for x in lim.values()):
        return False
    if not isinstance(d["proof"], str) or not isinstance(d["network"], str):
        return False
    acts, bounds = d["acts"], d["act_bounds"]
    if not (isinstance(acts, list) and all(isinstance(a, str) for a in acts)):
        return False
    if not (
        isinstance(bounds, dict)
        and all(isinstance(k, str) and is_uint(v) for k, v in bounds.items())
    ):
        return False
    return is_uint(d["max_arg_bytes"])


def check_descriptor(d: Any, advertised: list[dict[str, Any]]) -> dict[str, Any]:
    """Admit ``d`` if it equals a descriptor advertised now; else refuse with
    the first code that applies (contract §3.1): ``bad_request`` (malformed),
    ``unsupported_profile`` (another executor than this daemon's),
    ``unsupported_guarantee`` (a hard limit), ``placement_stale`` (this
    daemon's executor but another boot, worker or field)."""
    if not well_formed(d):
        raise BadRequest("descriptor is not a well-formed v1 worker descriptor")
    ours = advertised[0]
    refusal = profile_refusal(d, ours)
    if refusal is not None:
        raise refusal
    digest = canonical_digest(d)
    for adv in advertised:
        if canonical_digest(adv) == digest:
            return adv
    if d["executor"]["boot"] != ours["executor"]["boot"]:
        raise PlacementStale("descriptor names an earlier boot of this daemon")
    raise PlacementStale("descriptor differs from every descriptor this daemon advertises now")
