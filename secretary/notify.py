"""systemd's notification protocol (sd_notify): one datagram per message to ``$NOTIFY_SOCKET``.

Outside systemd (no ``NOTIFY_SOCKET``) every call does nothing, so the daemon needs no special
case when it runs in a terminal.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

from loguru import logger


def watchdog_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """Given the environment, return how often to ping the watchdog (half its timeout), if asked.

    systemd sets ``WATCHDOG_USEC`` and, so that child processes ignore it, ``WATCHDOG_PID``.
    """
    usec, owner = environ.get("WATCHDOG_USEC", ""), environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if owner and (not owner.isdigit() or int(owner) != pid):
        return None
    return int(usec) / 2 / 1_000_000


def _address(name: str) -> str:
    # A leading "@" names a socket in Linux's abstract namespace, which starts with a NUL byte.
    return "\0" + name[1:] if name.startswith("@") else name


class Notifier:
    """Sends READY=1, STATUS=..., WATCHDOG=1, RELOADING=1 and STOPPING=1 to systemd."""

    def __init__(self, socket_name: str | None) -> None:
        self._address = _address(socket_name) if socket_name else None
        self._socket: socket.socket | None = None
        if self._address is not None:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._warned = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        return cls(env.get("NOTIFY_SOCKET") or None)

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=value`` fields as one message; return False if not sent (logged once)."""
        if self._socket is None or self._address is None:
            return False
        try:
            self._socket.sendto("\n".join(fields).encode(), self._address)
        except OSError as exc:
            # systemd going away must not stop the daemon; the journal says why pings stopped.
            if not self._warned:
                logger.warning("cannot notify systemd at {!r}: {}", self._address, exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", _status(status))

    def status(self, text: str) -> bool:
        return self.send(_status(text))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets Type=notify-reload (systemd 253+) match this message to its reload.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", _status("reloading the config"))

    def stopping(self, status: str) -> bool:
        return self.send("STOPPING=1", _status(status))

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _status(text: str) -> str:
    # One message carries several fields separated by newlines; a status must not break them.
    return "STATUS=" + " ".join(text.split())
