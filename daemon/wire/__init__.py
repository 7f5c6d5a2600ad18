"""The wire: the Unix-socket server, socket activation and param checking (contract §4)."""
