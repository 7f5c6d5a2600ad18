"""The ``echo`` act, always present (contract §6): returns its args unchanged."""

from __future__ import annotations

import attrs

from ._base import DEFAULT_MAX_ARG_BYTES, ActRequest, BaseAdapter


@attrs.define(eq=False)
class EchoAdapter(BaseAdapter):
    """Returns the request's args (bytes) unchanged; has no effect and no receipt."""

    tag: str = "echo"
    kind: str = attrs.field(default="echo", init=False)
    in_process: bool = True
    max_arg_bytes: int = DEFAULT_MAX_ARG_BYTES

    def call(self, request: ActRequest) -> bytes:
        """Return ``request.args``."""
        return bytes(request.args)


def echo_adapter() -> EchoAdapter:
    """The built-in ``echo`` adapter: tag ``echo``, bound 65536 bytes, in-process."""
    return EchoAdapter()
