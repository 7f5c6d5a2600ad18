"""``python`` acts in a real daemon: a package written to disk, imported at start (contract §6).

The package's function appends the attempt's key to a ledger file (its
effect) and, while the test holds it, blocks on a FIFO the test controls:
a call the test can SIGKILL the daemon in the middle of, with or without
its effect done. Its receipt reads the ledger.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._poll import wait_for
from tests.daemon._wardctl import set_up, wardctl
from tests.daemon.harness import Actor, Background, Daemon, Env, code_of, key
from wardd.client import AsyncClient, AsyncSession, Neuron, Retry, Session
from wardd.protocol import WarddError, encode_item

TOOLS = textwrap.dedent(
    """
    import os
    from wardd.adapters import DefiniteFailure

    ROOT = {root!r}

    def _hold(request, name):
        # while the test holds this point: say so, then block on the FIFO
        if os.path.exists(os.path.join(ROOT, name)):
            open(os.path.join(ROOT, "held", f"{{request.op}}.{{request.attempt}}"), "w").close()
            with open(os.path.join(ROOT, "fifo")) as f:
                f.read()

    def _effect(request):
        with open(os.path.join(ROOT, "ledger"), "a") as f:
            f.write(request.idempotency_key + "\\n")
            f.flush()
            os.fsync(f.fileno())

    def create(request):
        _hold(request, "hold-before")
        _effect(request)
        _hold(request, "hold-after")
        return {{"key": request.idempotency_key, "act": request.act, "args": request.args}}

    def refuse(request):
        raise DefiniteFailure("the CRM refused: " + request.args.decode())

    def crash(request):
        raise ConnectionResetError("the CRM reset the connection")

    def unencodable(request):
        _effect(request)
        return {{"created": {{1, 2}}}}

    def large(request):
        # a valid value of ~1.4 MB of CBOR: more than a reply (max_frame 1 MiB) holds
        _effect(request)
        return list(range(300000))

    def deep(request):
        # the same, 40 maps deep, each with small parts beside the large one
        _effect(request)
        value = list(range(300000))
        for level in range(40):
            value = {{"level": level, "inner": value, "pad": [level] * 3}}
        return value

    def receipt(key):
        with open(os.path.join(ROOT, "ledger")) as f:  # raises while there is none
            keys = f.read().split()
        return ("executed", {{"ledger": keys.index(key)}}) if key in keys else "not_executed"

    def held_receipt(key):
        # while the test holds receipts: say so (per op), then block on the FIFO
        if os.path.exists(os.path.join(ROOT, "hold-receipt")):
            op = key.rsplit("/", 2)[1]
            open(os.path.join(ROOT, "held", f"receipt.{{op}}"), "w").close()
            with open(os.path.join(ROOT, "fifo")) as f:
                f.read()
        return receipt(key)
    """
)


class Tools:
    """The package ``crmtools`` in ``<root>/lib``, and the files its functions use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lib = root / "lib"
        (self.lib / "crmtools").mkdir(parents=True)
        (self.lib / "crmtools" / "__init__.py").write_text(TOOLS.format(root=str(root)))
        (root / "held").mkdir()
        self.ledger = root / "ledger"
        self.fifo = root / "fifo"
        os.mkfifo(self.fifo)

    def act(self, function: str = "create", **table: Any) -> dict[str, Any]:
        return {
            "adapter": "python",
            "callable": f"crmtools:{function}",
            "python_path": [str(self.lib)],
            **table,
        }

    def hold(self, where: str) -> None:
        """Calls from now on block before (``before``) or after their effect (``after``)."""
        (self.root / f"hold-{where}").touch()

    def unhold(self) -> None:
        for where in ("before", "after"):
            (self.root / f"hold-{where}").unlink(missing_ok=True)

    def held(self, op: str, attempt: int = 1) -> bool:
        """The call of ``op`` is at the point held (and blocks on the FIFO)."""
        return (self.root / "held" / f"{op}.{attempt}").exists()

    def release(self) -> None:
        """Let a held call go on: open the FIFO's other end once the call has its end
        open (a non-blocking open fails until then), and close it (EOF)."""
        self.unhold()

        def opened() -> bool:
            try:
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no reader yet
                return False
            return True

        wait_for(opened, what="the held call to open the FIFO")

    def ledger_keys(self) -> list[str]:
        return self.ledger.read_text().split() if self.ledger.exists() else []


@pytest.fixture
def tools(tmp_path: Path) -> Tools:
    return Tools(tmp_path)


def python_env(tools: Tools, **acts: dict[str, Any]) -> Env:
    return Env(acts=acts or {"crm.create": tools.act(receipt="crmtools:receipt")})


def crash_in_a_held_call(d: Daemon, a: Actor, tools: Tools, op: str) -> None:
    """Invoke ``op``, wait until the function is held, then SIGKILL and restart."""
    call = Background(a.invoke, op, 1, d.connect())
    wait_for(lambda: tools.held(op), what="the function to block")
    d.kill()
    call.done.wait(10)
    d.start()
    a.client = d.connect()


def log_events(d: Daemon, event: str) -> list[dict[str, Any]]:
    return d.logged(event)


class TestOutcomes:
    def test_each_way_a_function_ends_gives_its_outcome(self, make_daemon, tools):
        """Returned wire value → succeeded; DefiniteFailure → failed; another exception
        or a value that cannot be sent back → unknown, with the exception's text."""
        acts = {
            "crm.create": tools.act(),
            "crm.refuse": tools.act("refuse"),
            "crm.crash": tools.act("crash"),
            "crm.odd": tools.act("unencodable"),
        }
        d = make_daemon(python_env(tools, **acts))
        a = Actor(d, acts=tuple(acts))
        for op, act in [("ok", "crm.create"), ("no", "crm.refuse"), ("rst", "crm.crash")]:
            a.submit(op, act, b"acme")
        a.submit("odd", "crm.odd")
        ok = a.invoke("ok")
        assert ok["status"] == "succeeded"
        assert ok["result"] == {"key": key(a, "ok"), "act": "crm.create", "args": b"acme"}
        assert a.state("ok") == "retained"
        no = a.invoke("no")
        assert no["status"] == "failed" and no["error"] == "the CRM refused: acme"
        assert a.state("no") == "pending"
        rst = a.invoke("rst")
        assert rst["status"] == "unknown"
        assert rst["error"] == "ConnectionResetError: the CRM reset the connection"
        odd = a.invoke("odd")
        assert odd["status"] == "unknown" and "the function returned a dict" in odd["error"]
        assert a.state("odd") == "unknown"
        # the effect of the unencodable call happened: the operator reconciles it
        assert tools.ledger_keys() == [key(a, "ok"), key(a, "odd")]

    def test_a_running_call_cannot_be_aborted(self, make_daemon, tools):
        """abort of an in-process call is not_abortable and changes nothing; the call's
        own outcome stands once it returns."""
        d = make_daemon(python_env(tools))
        a = Actor(d, acts=("crm.create",))
        a.submit("op", "crm.create")
        tools.hold("after")
        call = Background(a.invoke, "op", 1, d.connect())
        try:
            wait_for(lambda: tools.held("op"), what="the function to block")
            assert code_of(a.call, "abort", {"op": "op", "attempt": 1}).code == "not_abortable"
            assert a.state("op") == "running"
        finally:
            if tools.held("op"):
                tools.release()
        assert call.result()["status"] == "succeeded"
        assert tools.ledger_keys() == [key(a, "op")]


class TestReceiptsAfterACrash:
    def test_a_call_killed_after_its_effect_is_executed_by_its_receipt(self, make_daemon, tools):
        """SIGKILL after the effect: the start's receipt records succeeded with its value."""
        d = make_daemon(python_env(tools))
        a = Actor(d, acts=("crm.create",))
        a.submit("op", "crm.create")
        tools.hold("after")
        crash_in_a_held_call(d, a, tools, "op")
        info = a.op("op")
        assert info["state"] == "retained"
        assert info["attempts"][0]["outcome"] == {
            "status": "succeeded",
            "value": {"ledger": 0},
            "source": "receipt",
        }
        assert a.read("status")["recovery"] == {"marked_unknown": 1, "resolved_by_receipt": 1}
        assert tools.ledger_keys() == [key(a, "op")]

    def test_a_call_killed_before_its_effect_is_not_executed_and_runs_once(
        self, make_daemon, tools
    ):
        """SIGKILL before the effect: the receipt's not_executed is applied at start
        (in-process), the op is pending, and its next attempt has the one effect."""
        d = make_daemon(python_env(tools))
        a = Actor(d, acts=("crm.create",))
        a.submit("op", "crm.create")
        tools.ledger.write_text("")  # the service is up: the receipt can answer
        tools.hold("before")
        crash_in_a_held_call(d, a, tools, "op")
        info = a.op("op")
        assert info["state"] == "pending"
        assert info["attempts"][0]["outcome"]["status"] == "not_executed"
        assert info["attempts"][0]["outcome"]["source"] == "receipt"
        tools.unhold()
        a.bind(0)
        assert a.invoke("op", 2)["status"] == "succeeded"
        assert tools.ledger_keys() == [key(a, "op", 2)]

    def test_a_receipt_that_raises_leaves_unknown_until_check_receipts(self, make_daemon, tools):
        """A receipt that raises at start is unknown, logged, its detail kept; once it
        can answer, check_receipts resolves the attempt."""
        d = make_daemon(python_env(tools))
        a = Actor(d, acts=("crm.create",))
        a.submit("op", "crm.create")
        tools.hold("before")
        crash_in_a_held_call(d, a, tools, "op")  # no ledger yet: the receipt raises
        att = a.op("op")["attempts"][0]
        assert att["state"] == "unknown"
        assert att["evidence"]["receipt_hint"] == "unknown"
        assert att["evidence"]["receipt_detail"].startswith("the receipt raised FileNotFoundError")
        failed = log_events(d, "receipt_failed")
        assert [(x["op"], x["attempt"], x["error"]) for x in failed] == [
            ("op", 1, "FileNotFoundError")
        ]
        tools.ledger.write_text("")
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 1}
        assert a.op("op")["attempts"][0]["outcome"]["status"] == "not_executed"


class TestReceiptsPastTheStartBudget:
    def test_hanging_receipts_go_on_after_ready_and_a_reconcile_waits_for_them(
        self, make_daemon, tools
    ):
        """Three unknown attempts whose receipts block at start: past the start's
        budget the daemon sends READY=1 and serves, every check still counts
        in receipts_pending, a reconcile of one waits for its receipt, and
        once the receipts answer they resolve the attempts, each once."""
        acts = {"crm.crash": tools.act("crash", receipt="crmtools:held_receipt")}
        d = make_daemon(python_env(tools, **acts))
        a = Actor(d, acts=tuple(acts))
        ops = ["op1", "op2", "op3"]
        for op in ops:
            a.submit(op, "crm.crash")
            assert a.invoke(op)["status"] == "unknown"
        tools.ledger.write_text(key(a, "op2") + "\n")  # op2's effect happened
        assert d.terminate() == 0
        hold = tools.root / "hold-receipt"
        hold.touch()
        try:
            d.start()  # READY=1 while op1's receipt still blocks
            a.client = d.connect()
            assert [x["checks"] for x in log_events(d, "receipts_deferred")] == [3]
            # op1 blocks in the start's turn; op2 and op3 went on in the background
            for op in ops:
                wait_for((tools.root / "held" / f"receipt.{op}").exists, what=f"{op}'s receipt")
            assert a.read("status")["receipts_pending"] == 3
            waiting = Background(reconcile, a, "op2", "not_executed", d.connect())
            wait_for(
                lambda: waiting.done.is_set() or log_events(d, "reconcile_waiting"),
                what="the reconcile to answer or wait",
            )
            assert not waiting.done.is_set(), f"answered before its receipt: {waiting.value!r}"
            assert [a.op(op)["attempts"][0]["state"] for op in ops] == ["unknown"] * 3
            hold.unlink()
            # EOF to each receipt holding the FIFO (one may open it just after)
            wait_for(
                lambda: _eof(tools.fifo) and a.read("status")["receipts_pending"] == 0,
                what="the receipts to answer",
            )
        finally:
            hold.unlink(missing_ok=True)
            _eof(tools.fifo)
        err = waiting.error_of()  # the receipt's executed stands
        assert isinstance(err, WarddError) and err.code == "conflict"
        assert err.data == {"status": "succeeded", "source": "receipt"}
        outcomes = [a.op(op)["attempts"][0]["outcome"] for op in ops]
        assert outcomes == [
            {"status": "not_executed", "source": "receipt"},
            {"status": "succeeded", "value": {"ledger": 0}, "source": "receipt"},
            {"status": "not_executed", "source": "receipt"},
        ]
        assert sorted(x["op"] for x in log_events(d, "receipt")) == ops  # each asked once
        assert "reconciled" not in [r["kind"] for r in a.history("op2")]

    def test_a_stop_cuts_the_deferred_checks_and_they_record_nothing(self, make_daemon, tools):
        """SIGTERM while the start's deferred receipts still block: a reconcile
        waiting for one is refused (overloaded, receipt_pending), the checks
        record nothing, the exit is clean; the next start's receipts resolve
        the attempts."""
        acts = {"crm.crash": tools.act("crash", receipt="crmtools:held_receipt")}
        d = make_daemon(python_env(tools, **acts))
        a = Actor(d, acts=tuple(acts))
        ops = ["op1", "op2"]
        for op in ops:
            a.submit(op, "crm.crash")
            assert a.invoke(op)["status"] == "unknown"
        tools.ledger.write_text(key(a, "op2") + "\n")
        assert d.terminate() == 0
        hold = tools.root / "hold-receipt"
        hold.touch()
        try:
            d.start()
            a.client = d.connect()
            for op in ops:
                wait_for((tools.root / "held" / f"receipt.{op}").exists, what=f"{op}'s receipt")
            waiting = Background(reconcile, a, "op2", "not_executed", d.connect())
            wait_for(lambda: log_events(d, "reconcile_waiting"), what="the reconcile to wait")
            assert d.proc is not None
            d.proc.send_signal(signal.SIGTERM)
            err = waiting.error_of()
            assert isinstance(err, WarddError)
            assert (err.code, err.data.get("reason")) == ("overloaded", "receipt_pending")
            assert d.proc.wait(30) == 0
        finally:
            hold.unlink(missing_ok=True)
            _eof(tools.fifo)
        assert log_events(d, "receipt") == []  # a cut check records nothing
        d.start()
        a.client = d.connect()
        outcomes = [a.op(op)["attempts"][0].get("outcome") for op in ops]
        assert outcomes == [
            {"status": "not_executed", "source": "receipt"},
            {"status": "succeeded", "value": {"ledger": 0}, "source": "receipt"},
        ]
        assert "reconciled" not in [r["kind"] for r in a.history("op2")]


def reconcile(a: Actor, op: str, status: str, client: Any) -> Any:
    params = {"op": op, "attempt": 1, "outcome": {"status": status}}
    return a.call("reconcile", params, client=client)


def _eof(fifo: Path) -> bool:
    """Open the FIFO's writing end and close it: every reader holding it reads EOF.
    Always true (a bounded wait polls it with its real condition)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: no reader holds it now
        pass
    return True


def wardd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wardd.daemon.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


class TestConfigErrors:
    @pytest.mark.parametrize("key", ["callable", "receipt"])
    @pytest.mark.parametrize(
        "spec,reason",
        [
            ("crmtool:create", "module 'crmtool' does not import"),
            ("crmtools:make", "module 'crmtools' has no attribute 'make'"),
            ("crmtools:ROOT", "'crmtools:ROOT' is not callable"),
            ("crmtools.create", "(no ':' between them)"),
        ],
    )
    def test_check_config_and_a_start_refuse_it_in_one_line(self, tools, key, spec, reason):
        """check-config and `wardd run` exit 78 with one line naming the dotted key."""
        act = tools.act(receipt="crmtools:receipt")
        act[key] = spec
        env = python_env(tools, **{"crm.create": act})
        for args in (("check-config", str(env.config)), ("run", "--config", str(env.config))):
            out = wardd(*args)
            assert out.returncode == 78, out
            line = f'wardd: config error: {env.config}: acts."crm.create".{key}: '
            assert out.stderr.startswith(line) and reason in out.stderr
            assert out.stderr.count("\n") == 1
        assert not env.database.exists()  # the start stopped before anything was opened

    @pytest.mark.parametrize("value,where", [("/opt/x", "python_path"), ([1], "python_path[0]")])
    def test_python_path_must_be_a_list_of_strings(self, tools, value, where):
        """python_path as one string, or holding a number, is refused naming the key."""
        env = python_env(tools, **{"crm.create": tools.act(python_path=value)})
        for args in (("check-config", str(env.config)), ("run", "--config", str(env.config))):
            out = wardd(*args)
            assert out.returncode == 78
            assert f'acts."crm.create".{where}: ' in out.stderr

    def test_check_config_accepts_the_package_and_default_config_shows_the_keys(self, tools):
        """A good python act passes check-config; default-config shows every python key."""
        env = python_env(tools)
        out = wardd("check-config", str(env.config))
        assert out.returncode == 0, out.stderr
        assert "crm.create" in out.stdout
        from wardd.adapters import _python

        shown = wardd("default-config").stdout
        for name in _python._KEYS:
            assert f"\n# {name} = " in shown, name


def omission_of(value: Any) -> dict[str, Any]:
    """What a reply carries in place of a part too large for it (contract §4)."""
    encoded = encode_item(value, canonical=True)
    return {"omitted_bytes": len(encoded), "digest": hashlib.sha256(encoded).hexdigest()}


def deep_value() -> Any:
    """What ``crmtools:deep`` returns."""
    value: Any = list(range(300000))
    for level in range(40):
        value = {"level": level, "inner": value, "pad": [level] * 3}
    return value


class TestValuesTooLargeForAReply:
    """A stored value whose encoding exceeds max_frame: every reply that carries
    it replaces it as a whole by its length and digest, so the op stays
    readable over the wire; the record keeps it whole."""

    def test_a_300000_int_list_is_answered_and_stays_readable(self, make_daemon, tools):
        acts = {"crm.large": tools.act("large")}
        d = make_daemon(Env(acts=acts))
        set_up(d.env, "crm.large")
        wardctl(d.env, "submit", "p", "big", "crm.large")
        shown = wardctl(d.env, "invoke", "big", check=False)
        assert shown.returncode == 0, shown.stderr
        assert "op big attempt 1: succeeded" in shown.stdout
        whole = omission_of(list(range(300000)))
        assert whole["omitted_bytes"] > 1 << 20
        assert whole["digest"] in shown.stdout
        op = json.loads(wardctl(d.env, "--json", "op", "show", "big").stdout)
        assert op["state"] == "retained" and op["result"]["value"] == whole
        assert op["attempts"][0]["outcome"]["value"] == whole
        history = json.loads(wardctl(d.env, "--json", "history", "big").stdout)
        assert history[-1]["kind"] == "outcome" and history[-1]["data"]["status"] == "succeeded"
        listed = json.loads(wardctl(d.env, "--json", "ops").stdout)
        assert [o["op"] for o in listed] == ["big"]
        neuron = Neuron.load(d.env.root / "neuron.key")
        with d.connect() as client:
            assert Session(client, neuron).consume("big").result.value == whole
        assert tools.ledger_keys() == [f"{neuron.id}/big/1"]

    def test_the_async_session_with_retry_gets_the_outcome(self, make_daemon, tools):
        """AsyncSession.invoke(retry=Retry()) answers succeeded, once, not internal."""
        d = make_daemon(Env(acts={"crm.large": tools.act("large")}))

        async def body() -> Any:
            async with AsyncClient.connect(d.env.socket) as client:
                session = AsyncSession(client, Neuron.generate())
                await session.register()
                await session.create_prog("p", 100)
                await session.grant("p", ["crm.large"])
                await session.bind("w0")
                await session.submit("p", "big", "crm.large")
                return await session.invoke("big", retry=Retry(backoff=0))

        done = anyio.run(body)
        assert (done.status, done.attempt) == ("succeeded", 1)
        assert done.result == omission_of(list(range(300000)))
        assert len(tools.ledger_keys()) == 1

    def test_a_deep_value_is_replaced_as_a_whole(self, make_daemon, tools):
        """40 maps deep, its large list at the bottom: the whole value is one
        {omitted_bytes, digest}, in the invoke's answer and in get_operation."""
        d = make_daemon(Env(acts={"crm.deep": tools.act("deep")}))
        a = Actor(d, acts=("crm.deep",))
        a.submit("deep", "crm.deep")
        expected = omission_of(deep_value())
        assert a.invoke("deep")["result"] == expected
        op = a.op("deep")
        assert op["result"]["value"] == expected
        assert op["attempts"][0]["outcome"]["value"] == expected
