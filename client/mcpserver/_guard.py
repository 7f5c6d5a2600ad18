"""The daemon side of ``wardd mcp``: set-up at start, placement, one call per tool call.

`Guard` talks to the daemon as any client does (`AsyncClient`,
`AsyncSession`), with the neuron of the configured key. Each tool call opens
a connection of its own: its ``hello`` tells which boot answers, so a daemon
restarted between two calls costs one `ensure_placement`, never a lost
answer to a request sent on a connection that was already dead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import structlog

from wardd.client import (
    AsyncClient,
    AsyncSession,
    Called,
    ClientError,
    ConnectionClosed,
    MayHaveRun,
    Neuron,
    NotSent,
)
from wardd.protocol import PlacementStale, UnknownProg, WarddError

from .._doubt import PRUNED_TEXT, discarded, refusal_in_doubt
from ._config import McpConfig
from ._results import Answer, Finished, Lost, Refused, Unreachable

__all__ = ["Guard", "SetUpFailed"]

CLIENT_NAME = "wardd-mcp"
log = structlog.get_logger("wardd.mcp")


class SetUpFailed(Exception):
    """The start could not prepare the neuron, prog, grant or placement (one line)."""


@attrs.define(eq=False)
class Guard:
    """The configured neuron, prog and worker, and the boot it is placed on."""

    config: McpConfig
    neuron: Neuron
    _epoch: int | None = None  # read at start, sent as expected_epoch on every call
    _placed_boot: str | None = None
    _placing: anyio.Lock = attrs.field(factory=anyio.Lock)

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[AsyncSession]:
        async with AsyncClient.connect(self.config.socket, client_name=CLIENT_NAME) as client:
            yield AsyncSession(client, self.neuron, epoch=self._epoch)

    # -- the start ----------------------------------------------------------------
    async def set_up(self) -> None:
        """Check that the worker accepts every tool's act (before anything is
        written: a refused start changes nothing), then register the neuron,
        create the prog when it is missing and grant the acts to the prog it
        created (never again to a prog that existed: an operator's revoke
        survives a restart), and place the neuron. Raises `SetUpFailed`."""
        try:
            async with self._session() as session:
                await self._check_worker(session)
                self._epoch = (await session.register()).epoch
                session.epoch = self._epoch
                created = await self._ensure_prog(session)
                await self._ensure_grant(session, created=created)
                await self._place(session)
        except (OSError, ClientError) as exc:
            raise SetUpFailed(f"cannot use the daemon at {self.config.socket}: {exc}") from exc
        except WarddError as exc:
            raise SetUpFailed(f"the daemon refused the set-up ({exc.code}): {exc}") from exc

    async def _ensure_prog(self, session: AsyncSession) -> bool:
        """Create the prog when it is missing; True when this start created it."""
        try:
            await session.get_prog(self.config.prog)
        except UnknownProg:
            await session.create_prog(self.config.prog, self.config.step_limit)
            log.info("mcp_prog_created", prog=self.config.prog, step_limit=self.config.step_limit)
            return True
        return False

    async def _ensure_grant(self, session: AsyncSession, *, created: bool) -> None:
        """Grant the tools' acts to a prog this start created. A prog that
        existed keeps its grant as the operator left it: an act revoked (or a
        grant disabled) stays so across restarts; a tool whose act it lacks
        is logged (``mcp_not_granted``) and its calls are refused until an
        operator grants it (``wardctl grant``)."""
        root = await session.get_neuron()
        grant = (root.grants or {}).get(self.config.prog) or {}
        have = set(grant.get("acts") or [])
        missing = {t.act for t in self.config.tools} - have
        if created and missing:
            await session.grant(
                self.config.prog,
                have | missing,
                enabled=True,
                expected_policy_version=root.policy_version,
            )
            log.info("mcp_granted", prog=self.config.prog, acts=sorted(missing))
        elif missing:
            log.warning(
                "mcp_not_granted",
                prog=self.config.prog,
                acts=sorted(missing),
                hint=f"wardctl grant {self.config.prog} ACT... (the acts to keep, these included)",
            )
        if grant and not bool(grant.get("enabled", True)):
            log.warning("mcp_grant_disabled", prog=self.config.prog)

    async def _check_worker(self, session: AsyncSession) -> None:
        workers = {w.worker: w for w in await session.workers()}
        worker = workers.get(self.config.worker)
        if worker is None:
            hosted = ", ".join(sorted(workers)) or "none"
            raise SetUpFailed(
                f"worker: the daemon hosts no worker {self.config.worker!r} (it hosts: {hosted})"
            )
        accepted = set(worker.descriptor.get("acts") or [])
        for tool in self.config.tools:
            if tool.act not in accepted:
                raise SetUpFailed(
                    f'tools."{tool.act}": the daemon has no act {tool.act!r} '
                    f"(its acts: {', '.join(sorted(accepted))}); configure it in the "
                    "daemon's [acts] first"
                )

    async def _place(self, session: AsyncSession, *, again: bool = False) -> None:
        """Place the neuron on this boot's worker unless it already is (one at a time)."""
        boot = session.client.hello_result.boot
        async with self._placing:
            if boot == self._placed_boot and not again:
                return
            placed = await session.ensure_placement(self.config.worker)
            self._placed_boot = boot
        if placed.bound:
            log.info("mcp_placed", worker=self.config.worker, boot=boot)

    # -- one tool call ------------------------------------------------------------
    async def dispatch(self, op: str, act: str, args: bytes) -> Answer:
        """Run `op` once, as the daemon's `call` does; never raises.

        Shielded: a cancelled tool call never cancels a dispatch once it
        started, so its result still lands (and is logged)."""
        answer: Answer = Unreachable("the call was not made")
        with anyio.CancelScope(shield=True):
            answer = await self._dispatch(op, act, args)
        return answer

    async def _dispatch(self, op: str, act: str, args: bytes) -> Answer:
        try:
            async with self._session() as session:
                try:
                    await self._place(session)
                except (ConnectionClosed, OSError) as exc:
                    return Unreachable(str(exc))
                except (WarddError, ClientError) as exc:
                    return _refused(exc)
                return await self._call(session, op, act, args)
        except (OSError, ClientError) as exc:  # connect or hello: nothing was sent
            return Unreachable(str(exc))

    async def _call(self, session: AsyncSession, op: str, act: str, args: bytes) -> Answer:
        """One `call`; on ``placement_stale`` (a refused call writes nothing:
        the daemon restarted since this boot was placed) place again, once."""
        prog = self.config.prog
        try:
            try:
                called = await session.call(prog, op, act, args)
            except PlacementStale:
                await self._place(session, again=True)
                called = await session.call(prog, op, act, args)
        except NotSent as exc:  # never sent: nothing ran
            return Unreachable(str(exc))
        except ConnectionClosed as exc:  # sent, and the answer lost: it may have run
            log.warning("mcp_answer_lost", op=op, error=str(exc))
            return Lost("the daemon's answer was lost after the request was sent")
        except MayHaveRun as exc:  # an error that can come after the claim: no refusal
            log.warning("mcp_may_have_run", op=op, error=str(exc))
            return Lost(str(exc), exc.attempt)
        except (WarddError, ClientError) as exc:
            return _refused(exc)
        await _finish(session, called)
        return _answer(called)


async def _finish(session: AsyncSession, called: Called) -> None:
    """End an op that ended definitely, so that retention prunes it in time:
    a success is consumed, a failure cancelled. A repeated `call` still
    answers the same outcome from its attempt (contract §3.2.6); only an
    unknown attempt is left as it is, for a receipt or an operator."""
    state = None if called.state is None else str(called.state)
    status = None if called.status is None else str(called.status)
    try:
        if status == "succeeded" and state in (None, "retained"):
            await session.consume(called.op)
        elif status in ("failed", "not_executed") and state in (None, "pending"):
            await session.cancel(called.op)
    except (WarddError, ClientError) as exc:  # the outcome stands; only the tidying failed
        log.warning("mcp_finish_failed", op=called.op, error=str(exc))


def _answer(called: Called) -> Answer:
    """What `call` said, as the result's cases: an outcome (now or ``already``;
    a cancelled op's success with its value discarded); a pruned op, whose
    fate is no longer known, as may have run; or, for an op cancelled
    before any attempt reached its claim, ``terminal`` (nothing ran)."""
    if called.pruned:
        return Lost(f"the operation is {called.state}; {PRUNED_TEXT}", called.attempt)
    if called.attempt is not None and called.status is not None:
        return Finished(
            called.attempt,
            str(called.status),
            called.result,
            called.error,
            called.already,
            discarded(called.status, called.state),
        )
    state = str(called.state) if called.state is not None else "finished"
    return Refused("terminal", f"the operation is {state} and no attempt of it ran")


def _refused(exc: WarddError | ClientError) -> Refused:
    if isinstance(exc, WarddError):
        data: dict[str, Any] = exc.data or {}
        attempt = data.get("attempt")
        return Refused(
            exc.code,
            exc.message,
            attempt if isinstance(attempt, int) else None,
            refusal_in_doubt(exc),
        )
    return Refused("client_error", str(exc))
