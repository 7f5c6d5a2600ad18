"""docs/recipes.md "Guard a Stripe-style API" stays true: its API and act, run for real.

The recipe's ``stripe_api.py`` is taken from the page and run as a process
of its own on 127.0.0.1 (on a free port: the page's 8081 may be taken), its
printed lines read from a file; the act is the page's TOML block, with the
port and the secret file's path put in. The steps then run against a real
daemon: a charge, a SIGKILL in the middle of a slow charge settled by the
start's replay, and the same crash once the claim is older than
``replay_window_s``, left unknown with nothing sent. The slow charges are
shorter than the page's 5 s: the page leaves time to type ``kill -9``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._poll import wait_for
from tests._recipes import recipe_block, recipe_section
from tests.daemon.harness import Actor, Background, Env, key

ROOT = Path(__file__).resolve().parents[2]
PAGE_PORT = "8081"


def section() -> str:
    return recipe_section("Guard a Stripe-style API")


def block(language: str, containing: str) -> str:
    return recipe_block("Guard a Stripe-style API", language, containing)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Api:
    """The page's ``stripe_api.py``, running; `lines` are what it printed."""

    def __init__(self, tmp_path: Path) -> None:
        script = tmp_path / "stripe_api.py"
        script.write_text(block("python", "stripe_api.py"))
        token = tmp_path / "stripe.token"
        token.write_text("sk_test_0123456789\n")
        self.auth = tmp_path / "stripe.auth"
        self.auth.write_text("Bearer sk_test_0123456789\n")
        self.out = tmp_path / "api.out"
        self.port = free_port()
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), str(token), str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_for(self.listening, what="the recipe's API to listen")

    def listening(self) -> bool:
        assert self.proc.poll() is None, self.out.read_text()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def said(self, line: str) -> int:
        return self.lines().count(line)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    running = Api(tmp_path)
    try:
        yield running
    finally:
        running.close()


def the_act(api: Api) -> dict[str, Any]:
    """The page's act, pointing at the running API and its secret file."""
    text = block("toml", 'receipt = "replay"')
    assert f"127.0.0.1:{PAGE_PORT}" in text and "/home/me/stripe.auth" in text
    text = text.replace(PAGE_PORT, str(api.port)).replace("/home/me/stripe.auth", str(api.auth))
    table: dict[str, Any] = tomllib.loads(text)["acts"]["pay.charge"]
    return table


def crash_during(d: Any, a: Actor, api: Api, op: str, args: dict[str, Any]) -> None:
    """Step 4's crash: a slow charge, the daemon SIGKILLed once the API has the
    request, and the API left to finish it (its ``charged`` line)."""
    a.submit(op, "pay.charge", json.dumps(args).encode())
    Background(a.invoke, op, 1, d.connect())
    wait_for(lambda: api.said(f"request {key(a, op)}") == 1, what="the API to have it")
    d.kill()
    wait_for(lambda: api.said(f"charged {key(a, op)} {args['amount']}") == 1, what="the charge")


def test_the_recipe_charges_settles_a_crash_by_replay_and_leaves_a_late_one_unknown(
    make_daemon, api
):
    table = the_act(api)
    assert (table["receipt"], table["replay_window_s"]) == ("replay", 86400)
    env = Env(acts={"pay.charge": table})
    d = make_daemon(env)
    a = Actor(d, acts=("pay.charge",))
    # 3. a charge
    a.submit("order-1", "pay.charge", b'{"amount": 1200}')
    r = a.invoke("order-1")
    assert r["status"] == "succeeded" and r["result"]["status"] == 200
    assert json.loads(r["result"]["body"]) == {"id": "ch_1", "amount": 1200}
    # 4. a crash in the middle of a charge, settled by the start's replay
    crash_during(d, a, api, "order-2", {"amount": 500, "slow": 0.5})
    d.start()
    a.client = d.connect()
    att = a.op("order-2")["attempts"][0]
    assert att["state"] == "succeeded" and att["outcome"]["source"] == "receipt"
    assert json.loads(att["outcome"]["value"]["body"])["id"] == "ch_2"
    assert api.said(f"request {key(a, 'order-2')}") == 2
    assert api.said(f"charged {key(a, 'order-2')} 500") == 1
    # 5. after the window: replay_window_s = 2, the daemon restarted
    env.acts["pay.charge"]["replay_window_s"] = 2
    env.write_config()
    assert d.terminate() == 0
    d.start()
    a.client = d.connect()
    a.bind()
    crash_during(d, a, api, "order-3", {"amount": 700, "slow": 0.5})
    claimed_by = time.time()  # the claim was made before the API had the request
    wait_for(lambda: time.time() > claimed_by + 2, what="the window to pass")
    d.start()
    a.client = d.connect()
    att = a.op("order-3")["attempts"][0]
    assert att["state"] == "unknown"
    assert "past the replay window of 2 s" in att["evidence"]["receipt_detail"]
    assert api.said(f"request {key(a, 'order-3')}") == 1  # the receipt sent nothing
