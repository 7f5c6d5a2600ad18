"""The method table (`wardd.daemon.dispatch.handlers.METHODS`): the per-method rules
it states once."""

from __future__ import annotations

import inspect
import typing

import attrs

from wardd.daemon.dispatch.handlers import METHODS, Guard
from wardd.daemon.dispatch.services import Services, Uses

READS = {"get_neuron", "get_prog", "get_operation", "list_operations", "history", "list_attempts"}


class TestMethodTable:
    def test_unsigned_methods_are_the_reads_status_metrics_list_workers_and_execute(self):
        """Every other method is a signed write (contract §4)."""
        unsigned = {name for name, m in METHODS.items() if not m.signed}
        assert unsigned == READS | {"status", "metrics", "list_workers", "execute"}

    def test_only_reads_and_execute_are_served_while_stopping(self):
        """During a stop, writes are refused; reads, status, list_workers and
        execute (whose token is void by then) are still served (contract §3.6)."""
        served = {name for name, m in METHODS.items() if m.served_while_stopping}
        assert served == READS | {"status", "metrics", "list_workers", "execute"}

    def test_only_status_metrics_and_list_workers_are_served_before_recovery(self):
        """Every other method waits until the start-up recovery is done (contract §3.6)."""
        early = {name for name, m in METHODS.items() if not m.waits_for_recovery}
        assert early == {"status", "metrics", "list_workers"}

    def test_the_writes_that_revoke_hold_the_ward_guard_exclusively(self):
        """Grant, placement, epoch and prog-state changes run holding the guard
        exclusively; execute, invoke and call take it on the dispatch path (contract §3.1)."""
        by_guard = {g: {n for n, m in METHODS.items() if m.guard is g} for g in Guard}
        assert by_guard[Guard.EXCLUSIVE] == {
            "set_grant", "bind_placement", "release_placement", "advance_epoch", "set_prog_state",
        }  # fmt: skip
        assert by_guard[Guard.DISPATCH] == {"execute", "invoke", "call"}

    def test_hello_is_not_in_the_table(self):
        """hello is the server's, once per connection; after it, it is unknown_method."""
        assert "hello" not in METHODS

    def test_each_handler_takes_the_value_of_the_group_it_declares(self):
        """A handler is handed its entry's group (``uses``) and nothing else:
        its first parameter is typed as that group's value."""
        group_type = {f.name: f.type for f in attrs.fields(attrs.resolve_types(Services))}
        assert set(group_type) == {u.value for u in Uses}
        for name, m in METHODS.items():
            first = next(iter(inspect.signature(m.handler).parameters))
            hint = typing.get_type_hints(m.handler)[first]
            assert hint is group_type[m.uses.value], name
