"""The daemon's life: the composition root, start and stop, signals, the owner
lock, recovery at the start and the orphans of earlier boots (contract §2, §3.6)."""
