"""The batched signature verifier (`wardd.daemon._verifier`): `verify`'s answers, in batches."""

from __future__ import annotations

import trio

from wardd.client import Neuron
from wardd.daemon._verifier import Verifier
from wardd.protocol import verify

NETWORK = "unit-net"


def _requests(n: int) -> list[tuple[str, bytes, str, str, dict[str, object]]]:
    signer, other = Neuron.generate(), Neuron.generate()
    out = []
    for i in range(n):
        params = signer.sign("create_prog", {"prog": f"p{i}", "step_limit": i}, NETWORK)
        if i % 3 == 1:  # tampered
            params = {**params, "step_limit": i + 1}
        elif i % 3 == 2:  # someone else's key claimed
            params = {**other.sign("create_prog", {"prog": f"p{i}"}, NETWORK), "neuron": signer.id}
        out.append((params["neuron"], params["sig"], NETWORK, "create_prog", params))
    return out


class TestVerifier:
    def test_concurrent_checks_get_verifys_answers_in_fewer_thread_calls(self):
        """Checks waiting at once are answered in batches, and each gets `verify`'s own answer."""
        reqs = _requests(60)
        got: dict[int, bool] = {}

        async def main() -> Verifier:
            v = Verifier(alone=lambda: False)

            async def one(i: int) -> None:
                got[i] = await v.verify(*reqs[i])

            async with trio.open_nursery() as nursery:
                for i in range(len(reqs)):
                    nursery.start_soon(one, i)
            v.close()
            return v

        v = trio.run(main)
        assert got == {i: verify(*r) for i, r in enumerate(reqs)}
        assert [got[i] for i in range(3)] == [True, False, False]
        assert v.checks == len(reqs)
        assert v.batches < len(reqs)

    def test_a_check_alone_runs_inline(self):
        """With no other request in flight the check runs on the caller's thread."""
        reqs = _requests(3)

        async def main() -> tuple[list[bool], Verifier]:
            v = Verifier(alone=lambda: True)
            return [await v.verify(*r) for r in reqs], v

        answers, v = trio.run(main)
        assert answers == [True, False, False]
        assert v.batches == 0

    def test_a_cancelled_caller_still_answers_its_batch(self):
        """A check's waiter cancelled meanwhile does not leave the others of its batch waiting."""
        reqs = _requests(30)
        got: dict[int, bool] = {}

        async def main() -> None:
            v = Verifier(alone=lambda: False)

            async def one(i: int) -> None:
                got[i] = await v.verify(*reqs[i])

            with trio.fail_after(30):
                async with trio.open_nursery() as kept:
                    async with trio.open_nursery() as doomed:
                        for i in range(30):
                            (doomed if i % 2 == 0 else kept).start_soon(one, i)
                        await trio.lowlevel.checkpoint()
                        doomed.cancel_scope.cancel()
            v.close()

        trio.run(main)
        for i in range(1, 30, 2):
            assert got[i] == verify(*reqs[i])
