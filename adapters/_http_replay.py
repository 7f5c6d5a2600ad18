"""``receipt = "replay"``: learn a request's fate by sending it again with its key (§6).

APIs modelled on Stripe's idempotency keys offer no lookup by key: the way
to learn what became of a request is to send the identical request again
with the same key, which the API answers with the response it saved (for as
long as it keeps the key), or by acting now if the first request never
reached it — never twice.

What is sent again is what the call sent. The claim records everything but
the body (`replay_record`): the method, the URL, the configured headers (a
secret header as the path of its file, never its value: the file is read
again for the replay), the key header and its form, and the replay window.
The body is the op's args, which the daemon stores when the op is
submitted and hands to the receipt (`SentCall`) with the claim's time.

The receipt (`HttpAdapter.receipt`):

- sends nothing and answers ``unknown`` once ``now - claimed_at`` reaches
  the window (the smaller of the claim's ``replay_window_s`` and the act's
  current one): the API may have forgotten the key, and the same request
  would then act a second time. Time only grows, so this is for ever;
- otherwise sends the identical request: method, URL, body, headers, the
  same key header with the same value (the daemon asks only while the op
  could still run its act: a replay may make the effect now, so an op
  cancelled, a grant revoked, a prog paused or exhausted since the call
  gets ``unknown`` without this receipt being asked, `core.resend_refusal`);
- answers from a complete response (`_http_wire`): 2xx → ``executed``, the
  value being the response as a call's (``{status, headers, body,
  truncated}``); a status in ``no_effect_statuses`` → ``not_executed``;
  anything else → ``unknown``: 409 (the key's first request is still in
  flight), 425, 429, 5xx, a cut response, a timeout, an error.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ._base import Receipt, SentCall
from ._config import SecretFile
from ._http_wire import BAD_VALUE, HeaderValue

__all__ = ["REPLAY", "Replay", "answer", "replay_record"]

REPLAY = "replay"  # the one value of the ``receipt`` key


def replay_record(
    method: str, headers: tuple[tuple[str, HeaderValue], ...], window_s: float
) -> dict[str, Any]:
    """What a replay act's claim records beside the URL and the key's header and form
    (a secret header as ``{"file": path}``)."""
    return {
        "receipt": REPLAY,
        "replay_window_s": window_s,
        "method": method,
        "headers": [
            [name, value if isinstance(value, str) else {"file": value.path}]
            for name, value in headers
        ],
    }


@attrs.frozen
class Replay:
    """The request a claim recorded, to be sent again."""

    url: str
    method: str
    headers: tuple[tuple[str, HeaderValue], ...]
    key_header: str
    key_format: str
    window_s: float

    @classmethod
    def from_record(cls, record: object) -> Replay | str:
        """The claim's record read back, or why it cannot be replayed."""
        if not isinstance(record, Mapping) or record.get("receipt") != REPLAY:
            return 'the claim recorded no request to send again (made without receipt = "replay")'
        try:
            url, method = record["url"], record["method"]
            key_header, key_format = record["idempotency_header"], record["idempotency_format"]
            window_s = record["replay_window_s"]
            headers = tuple(_header(item) for item in record["headers"])
        except (KeyError, TypeError, ValueError):
            return "the claim's record of the request is unreadable"
        texts = (url, method, key_header)
        if not all(isinstance(t, str) and t for t in texts) or key_format not in ("key", "uuid5"):
            return "the claim's record of the request is unreadable"
        if isinstance(window_s, bool) or not isinstance(window_s, int | float) or window_s <= 0:
            return "the claim's record of the request is unreadable"
        return cls(url, method, headers, key_header, key_format, float(window_s))

    def too_late(self, sent: SentCall, window_s: float) -> str | None:
        """Why the request must not be sent again (the smaller of the claim's
        window and ``window_s``, the act's now, has passed), or None."""
        window = min(window_s, self.window_s)
        age = time.time() - sent.claimed_at
        if age < window:
            return None
        return (
            f"the claim is {age:.0f} s old, past the replay window of {window:g} s: "
            "the API may have forgotten the key, so nothing was sent"
        )


def _header(item: object) -> tuple[str, HeaderValue]:
    """A recorded header, as the act's table gives it (the secret's file, not its value)."""
    if not isinstance(item, list | tuple) or len(item) != 2 or not isinstance(item[0], str):
        raise ValueError("not a header")
    name, value = item
    if isinstance(value, str) and not BAD_VALUE.search(value):
        return name, value
    if isinstance(value, Mapping) and set(value) == {"file"} and isinstance(value["file"], str):
        return name, SecretFile(value["file"])
    raise ValueError("not a header value")


#: Statuses that answer for the replay's own credentials, not for the call:
#: an API checks them before it looks at the key (Stripe does), so after a
#: token rotation the replay of a call that charged is answered 401 or 403.
#: They never mean ``not_executed`` to a replay, whatever ``no_effect_statuses``.
ABOUT_THE_REPLAY: Final = frozenset({401, 403, 407})


def answer(status: int, value: dict[str, Any], no_effect: frozenset[int]) -> Receipt:
    """The replay's answer from a complete response's status."""
    if 200 <= status <= 299:
        return Receipt("executed", value)
    if status in no_effect and status not in ABOUT_THE_REPLAY:
        return Receipt("not_executed")
    return Receipt("unknown", detail=f"the replay was answered HTTP {status}")
