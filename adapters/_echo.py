"""The ``echo`` act, always present (contract §6): returns its args unchanged."""

from __future__ import annotations

from typing import Any

import attrs

from ._base import DEFAULT_MAX_ARG_BYTES, ActRequest


@attrs.define(eq=False)
class EchoAdapter:
    """Returns the request's args (bytes) unchanged; has no effect and no receipt."""

    tag: str = "echo"
    kind: str = attrs.field(default="echo", init=False)
    in_process: bool = True
    max_arg_bytes: int = DEFAULT_MAX_ARG_BYTES
    receipt_supported: bool = attrs.field(default=False, init=False)

    def call(self, request: ActRequest) -> bytes:
        """Return ``request.args``."""
        return bytes(request.args)

    def claim_info(self) -> dict[str, Any] | None:
        """Nothing to record with the claim."""
        return None


def echo_adapter() -> EchoAdapter:
    """The built-in ``echo`` adapter: tag ``echo``, bound 65536 bytes, in-process."""
    return EchoAdapter()
