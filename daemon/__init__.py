"""wardd.daemon."""
