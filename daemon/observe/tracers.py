"""The choice of tracer: the one place that may import the OpenTelemetry tracer.

Apart from :mod:`~wardd.daemon.observe.tracing` (the base every tracer
shares) so that neither the base nor :mod:`~wardd.daemon.observe.otel`
imports the other back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .tracing import NO_TRACER, Tracer

if TYPE_CHECKING:
    from ..config import TracingConfig

__all__ = ["make_tracer"]


def make_tracer(config: TracingConfig, version: str) -> Tracer:
    """The tracer ``config`` asks for: :data:`~wardd.daemon.observe.tracing.NO_TRACER`
    unless ``exporter = "otlp"``."""
    if not config.enabled:
        return NO_TRACER
    from .otel import OtelTracer  # the otel extra: imported only here

    return OtelTracer(config, version)
