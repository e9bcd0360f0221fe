"""Recorded results with their provenance, and one-line error text.

Numbers only a GPU can produce are measured by the scripts in ``bench/`` on a
GPU and written as JSON with their provenance (device, date, versions,
command); a chapter running on a CPU shows them from there and says where and
when they were measured, a chapter running on a GPU measures them live.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Optional

from .device import info


def provenance(command: str = "") -> dict[str, object]:
    """Where, when and with what a measurement was made: stored with every result."""
    i = info()
    return {
        "device": i["device_name"],
        "device_type": i["device"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": i["python"],
        "torch": i["torch"],
        "accelerate": i["accelerate"],
        "cuda": i["cuda"],
        # by default the command line that ran: a script gets its interpreter named
        "command": command or " ".join((["python"] if sys.argv[0].endswith(".py") else []) + sys.argv),
    }


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (its type name when the message is empty), for one-line errors."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


def write_result(path, data: dict, command: str = "") -> None:
    """Write ``{"provenance": ..., "data": data}`` as JSON, atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"provenance": provenance(command), "data": data}, indent=2) + "\n")
    tmp.replace(path)


def read_result(path) -> Optional[dict]:
    """A recorded result written by :func:`write_result`, or ``None`` if it was never measured."""
    path = Path(path)
    if not path.exists():
        return None
    return json.loads(path.read_text())


def provenance_note(result: dict) -> str:
    """One sentence saying where and when a recorded result was measured."""
    p = result["provenance"]
    return (
        f"Measured on {p['device']} on {p['date'][:10]} with torch {p['torch']}, "
        f"accelerate {p['accelerate']}, CUDA {p['cuda']} (command: {p['command']})."
    )
