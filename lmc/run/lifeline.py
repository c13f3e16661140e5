"""Which rank of a data-parallel job died first.

When one rank dies, MPICH's launcher kills the others and reports one process's exit.  Under
load that can be a rank its own clean-up killed (it sees several exits at once and names the
first in rank order), so its report alone cannot say who went first.  Each rank therefore holds
a lifeline: a Unix socket to the launcher side (`Lifelines`), connected at start and never
written to again.  The kernel closes it the moment the rank's process ends, however it ends,
and the first line to close alone names the rank that went first.  Ranks on another host cannot
reach the socket and hold none; the launcher's report is all there is for them."""
from __future__ import annotations

import os
import selectors
import shutil
import socket
import tempfile
import threading

ENV = "LMC_DIST_LIFELINE"


def hold(rank: int) -> socket.socket | None:
    """A rank's end of its lifeline (keep it referenced until exit), or None without one.
    Python's sockets are not inherited across exec, so a subprocess does not keep it open."""
    path = os.environ.get(ENV)
    if not path:
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(f"{rank} {os.getpid()} {socket.gethostname()}\n".encode())
    except OSError:
        s.close()
        return None
    return s


class Lifelines:
    """The launcher's side: accepts the ranks' lifelines on a helper thread and keeps the
    first rank whose line closed alone (`first`: (rank, pid, host)) and how many lines were
    held (`held`: fewer than the ranks when some ran on another host, whose end cannot be seen).
    Two lines closing within one wake-up of the thread cannot be ordered: `first` stays None then."""

    def __init__(self):
        self.first: tuple[int, int, str] | None = None
        self.held = 0
        self._dir = tempfile.mkdtemp(prefix="lmc-dist-")
        self.path = os.path.join(self._dir, "lifeline")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(self.path)             # fails on a socket path over ~100 bytes
            self._sock.listen(256)
        except OSError:
            self._sock.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self._sock.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ, None)
        self._decided = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="lmc-lifelines", daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._decided:
            events = self._sel.select(timeout=0 if self._stop.is_set() else 0.2)
            closed = [who for who in map(self._event, events) if who is not False]
            if closed:
                self._decided = True
                if len(closed) == 1 and closed[0] is not None:
                    self.first = closed[0]
            elif self._stop.is_set():
                return

    def _event(self, event):
        """Handle one ready socket: False unless a lifeline closed, then who held it (or None
        when it closed before saying)."""
        key, _ = event
        if key.data is None:                       # the listening socket: a rank connects
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return False
            self._sel.register(conn, selectors.EVENT_READ, bytearray())
            self.held += 1
            return False
        try:
            chunk = key.fileobj.recv(256)
        except OSError:
            chunk = b""
        if chunk:
            key.data.extend(chunk)
            return False
        self._sel.unregister(key.fileobj)
        key.fileobj.close()
        try:
            rank, pid, host = bytes(key.data).decode().split()
            return int(rank), int(pid), host
        except ValueError:
            return None

    def close(self) -> tuple[int, int, str] | None:
        """Stop watching (after the launcher exited: whatever closed is seen) and return `first`;
        a second call only returns it."""
        if self._stop.is_set():
            return self.first
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()
        self._sel.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        return self.first
