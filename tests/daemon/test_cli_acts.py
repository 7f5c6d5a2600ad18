"""`cli` acts through a real daemon: programs that ignore their input succeed on exit 0."""

from __future__ import annotations

import os

from tests.daemon.harness import Actor, Env


def ignoring_acts(root: str) -> dict[str, dict[str, object]]:
    """Real programs that never read stdin, each at the default args bound."""
    return {
        "true": {"adapter": "cli", "argv": ["/bin/true"]},
        "touch": {"adapter": "cli", "argv": ["/usr/bin/env", "touch", f"{root}/touched"]},
        "exit0": {"adapter": "cli", "argv": ["/bin/sh", "-c", "exit 0"]},
    }


class TestCliActsThatIgnoreTheirInput:
    def test_hundred_runs_with_small_and_max_size_args_all_succeed(self, make_daemon):
        """/bin/true, touch and sh -c 'exit 0', 102 invokes in all: every one succeeded."""
        env = Env()
        env.acts.update(ignoring_acts(str(env.root)))
        env.write_config()
        a = Actor(make_daemon(env), acts=("true", "touch", "exit0"))
        tags = ("true", "touch", "exit0")
        statuses = []
        for i in range(102):
            args = b"s" if i % 2 else os.urandom(65536)
            a.submit(f"op-{i}", tags[i % 3], args)
            statuses.append(a.invoke(f"op-{i}")["status"])
        assert statuses == ["succeeded"] * 102
        assert a.read("status")["unknown_attempts"] == 0

    def test_program_that_prints_a_megabyte_before_reading_succeeds(self, make_daemon):
        """A program writing 1 MB before it reads 1 MiB of args neither deadlocks nor loses them."""
        script = "head -c 1048576 /dev/zero | tr '\\0' x; cat"
        env = Env(
            max_frame=4 << 20,
            acts={
                "loud": {
                    "adapter": "cli",
                    "argv": ["/bin/sh", "-c", script],
                    "max_arg_bytes": 1 << 20,
                }
            },
        )
        a = Actor(make_daemon(env), acts=("loud",))
        args = os.urandom(1 << 20)
        a.submit("loud-1", "loud", args)
        r = a.invoke("loud-1")
        assert r["status"] == "succeeded"
        assert r["result"]["stdout"] == b"x" * (1 << 20) + args
        assert r["result"]["truncated"] is False
