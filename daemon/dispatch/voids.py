"""Durable voids the daemon writes itself, and the stop's void-and-answer (contract §3.6).

A void the daemon must write is critical: if it cannot be written the
daemon fail-stops, so that the next start marks the attempt unknown and
no op stays blocked by a prepared attempt whose token can no longer be
used. A request the stop keeps from its claim is answered only once its
attempt's void is durable: :func:`shutdown_refusal`.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from wardd.protocol import Internal, WarddError

from ..core.attempts import shutdown_void
from ..store.writer import Writer
from . import attempt_units

__all__ = ["Voids", "shutdown_refusal"]

log = structlog.get_logger("wardd")


def shutdown_refusal(voided: bool) -> WarddError:
    """contract §3.6: the answer to a request the stop keeps from its claim,
    once its attempt's void is durable (or when it had none): ``token_void``
    (``shutdown``); ``internal`` if the void could not be written."""
    if voided:
        return shutdown_void()
    return Internal("the attempt could not be voided")


class Voids:
    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def void(self, attempt_id: int, reason: str) -> bool:
        """Durably void a prepared attempt; False if the write failed (fail-stop)."""
        try:
            await self._writer.run(attempt_units.void(attempt_id, reason), critical=True)
        except WarddError as err:
            log.error("void_failed", reason=reason, error=err.message)
            self._writer.fail_stop(f"a void ({reason}) could not be written")
            return False
        return True

    async def refuse(self, attempt_id: int | None) -> WarddError:
        """The stop's answer to one request kept from its claim, once the
        void of its attempt (if it has one) is durable."""
        voided = attempt_id is None or await self.void(attempt_id, "shutdown")
        return shutdown_refusal(voided)

    async def void_shutdown(self, attempt_ids: Sequence[int]) -> bool:
        """The stop's voids in one unit (unclaimed dispatches, unused tokens);
        False if they could not be written (the writer fail-stops: the next
        start marks them unknown)."""
        if not attempt_ids:
            return True
        try:
            await self._writer.run(
                attempt_units.void_many(list(attempt_ids), "shutdown"), critical=True
            )
        except WarddError as err:
            log.error("void_failed", reason="shutdown", error=err.message)
            return False
        return True
