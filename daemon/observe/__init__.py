"""What an operator sees: log lines, metrics, sd_notify, the notify hook and
traces (docs/operations.md)."""
