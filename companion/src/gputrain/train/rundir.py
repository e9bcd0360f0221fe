"""The directories a run owns (chapter 6): each is probed before the first step, and locked while it runs.

A run that cannot write its checkpoint learns it at its first save, possibly
hours in; :func:`probe_directory` finds out before the first step by creating
and removing a file.  Two runs writing the same directory corrupt each
other's log and checkpoints; :class:`RunLock` puts ``gputrain.lock`` (the
process id, the host and the process's start time) in each directory, so a
second run refuses to start, and a lock left by a process that no longer
exists is taken over with a warning.  On any failure, what the probe created
is removed again: nothing is written.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional

LOCK_NAME = "gputrain.lock"


def probe_directory(name: str, directory) -> list[Path]:
    """Make sure ``directory`` can be written: create it (and missing parents), create and remove a file.

    Returns the directories it created (for :func:`remove_created`).  A failure
    removes them again and raises one ``ValueError`` naming ``name``.
    """
    directory = Path(directory)
    created = [p for p in (directory, *directory.parents) if not p.exists()][::-1]  # outermost first
    probe = directory / f".gputrain-probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.close(fd)
        probe.unlink()
    except OSError as exc:
        remove_created(created)
        reason = exc.strerror or type(exc).__name__
        raise ValueError(
            f"{name}={str(directory)!r} cannot be written ({reason}); choose a directory you can write to"
        ) from None
    return created


def remove_created(created: list[Path]) -> None:
    """Remove directories :func:`probe_directory` created, innermost first, if they are still empty."""
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:
            break


def _start_time(pid: int) -> Optional[str]:
    """When process ``pid`` started (clock ticks after boot, Linux), to tell it from a later one with its id."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(owner: dict) -> bool:
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    started = _start_time(pid)
    return owner.get("start") is None or started is None or started == owner["start"]


class RunLock:
    """``gputrain.lock`` in each of a run's directories, held from before the first step to the end."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self.me = {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_time(os.getpid())}

    def acquire(self, name: str, directory) -> None:
        path = Path(directory) / LOCK_NAME
        if any(path.resolve() == held.resolve() for held in self.paths):
            return  # the checkpoint and log directories are the same one
        record = json.dumps({**self.me, "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode()
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale(name, path)
                continue
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(record)
            except OSError as exc:  # a full disk: no half-written lock is left to block the next run
                path.unlink(missing_ok=True)
                raise ValueError(
                    f"{name}={str(directory)!r}: could not write {LOCK_NAME} ({exc.strerror or exc}); free space there"
                ) from None
            self.paths.append(path)
            return
        raise ValueError(f"{name}={str(directory)!r}: could not take {str(path)!r}; another run is starting there")

    def _take_over_if_stale(self, name: str, path: Path) -> None:
        try:
            owner = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            owner = {}  # unreadable: being written this instant, or damaged; treat it as held
            if time.time() - _mtime(path) > 60:
                owner = {"pid": -1, "host": self.me["host"]}
        who = f"process {owner.get('pid')} on {owner.get('host')}"
        if owner.get("host") == self.me["host"] and not _alive(owner):
            print(
                f"gputrain: warning: {name}: taking over {str(path)!r} from {who}, which is no longer running",
                file=sys.stderr,
                flush=True,
            )
            path.unlink(missing_ok=True)
            return
        since = f" since {owner['since']}" if owner.get("since") else ""
        where = "" if owner.get("host") == self.me["host"] else f"; if it is no longer running there, delete {path}"
        raise ValueError(
            f"{name}={str(path.parent)!r} is in use by another run ({who}{since}); "
            f"wait for it to finish or choose another directory{where}"
        )

    def release(self) -> None:
        """Remove the lock files this process holds."""
        for path in self.paths:
            try:
                if json.loads(path.read_text()).get("pid") == self.me["pid"]:
                    path.unlink()
            except (OSError, ValueError):
                pass
        self.paths = []


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


class RunDirectories:
    """Probe and lock a run's checkpoint and log directories; undo both on failure or at the end."""

    def __init__(self, directories: dict[str, str]):
        self.directories = {name: d for name, d in directories.items() if d}
        self.lock = RunLock()
        self.created: list[Path] = []

    def claim(self) -> None:
        try:
            for name, directory in self.directories.items():
                self.created += probe_directory(name, directory)
            for name, directory in self.directories.items():
                self.lock.acquire(name, directory)
        except BaseException:
            self.abandon()
            raise

    def abandon(self) -> None:
        """Undo :meth:`claim` entirely: the locks, and the directories it created (the run wrote nothing)."""
        self.lock.release()
        remove_created(self.created)
        self.created = []

    def release(self) -> None:
        """The run is over: remove the locks, keep what it wrote."""
        self.lock.release()
