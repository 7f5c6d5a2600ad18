"""The test hook that holds a call or a start at a named point.

Never reached from a request: only whoever starts the daemon sets its
environment, and only the real-process tests set the variables that name
a hold directory (``WARDD_TEST_FILE_APPEND_HOLD``,
``WARDD_TEST_RECOVERY_HOLD``). When that directory holds a FIFO named after
the point, the code that reaches the point opens it for reading, which
blocks until a test opens it for writing, and goes on once the test closes
it: a test can act (append to a file, SIGKILL the daemon) at that exact
point, without timing. With no FIFO there, or no directory named, it costs
a test or a stat.
"""

from __future__ import annotations

import os
import stat

__all__ = ["hold"]


def hold(directory: str | None, point: str) -> None:
    """Wait at ``point`` while a test holds the FIFO ``<directory>/<point>``
    open; nothing when there is no directory or no FIFO."""
    if directory is None:
        return
    path = os.path.join(directory, point)
    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # blocks until the test opens it
    except OSError:
        return
    try:
        while os.read(fd, 512):  # until the test closes its end
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
