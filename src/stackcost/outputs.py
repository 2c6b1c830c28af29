"""Can an output be written where it was asked? Answered before rendering, not after.

A report renders for seconds to minutes; finding out afterwards that -o names a
directory, or a place nobody may write, wastes that and ends in a traceback. The checks
try what the write will do (open the file for writing, create a file or a directory
beside it), since permission bits lie to root and say nothing about /proc. They leave
nothing behind: an existing file is opened without truncating, probes are removed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from stackcost.clip import shown
from stackcost.errors import SpecError


def check_output_file(path: Path, flag: str, inputs: Iterable[Path] = ()) -> None:
    """SpecError unless `path` can be written as a file, and is none of `inputs`."""
    name = shown(str(path))
    if path.is_dir():
        raise SpecError(f"{flag} {name} is a directory (expected a file to write)")
    if path.exists():
        for source in inputs:
            if source.exists() and path.samefile(source):
                raise SpecError(f"{flag} {name} is an input of this command: it would be lost")
        if not path.is_file():  # /dev/stdout, a pipe: nothing to probe without side effects
            return
        try:  # no O_TRUNC: the file keeps its bytes
            os.close(os.open(path, os.O_WRONLY))
        except OSError as exc:
            raise SpecError(f"{flag} {name} cannot be written ({exc.strerror})") from None
        return
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise SpecError(f"{flag} {name}: its directory {shown(str(parent))} {what}")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".stackcost-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SpecError(
            f"{flag} {name} cannot be written: directory {shown(str(parent))} "
            f"does not take new files ({exc.strerror})"
        ) from None


def check_output_dir(path: Path, flag: str) -> None:
    """SpecError unless files can be written in directory `path` (made with its parents)."""
    name = shown(str(path))
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise SpecError(f"{flag} {name}: {shown(str(existing))} is a file, not a directory")
    try:  # what the write does: a new file in `path`, or a new directory beside it
        if existing == path:
            fd, probe = tempfile.mkstemp(dir=path, prefix=".stackcost-probe-")
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".stackcost-probe-"))
    except OSError as exc:
        raise SpecError(f"{flag} {name} cannot be written ({exc.strerror})") from None


@contextlib.contextmanager
def writing(what: str) -> Iterator[None]:
    """SpecError naming `what` ("-o 'r.html'", "stdout") when a write inside fails after the
    checks passed (/dev/full, a /proc file root may open but not fill, a disk that filled
    meanwhile). A reader that left (BrokenPipeError) is not bad input: it passes through."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise SpecError(f"{what} could not be written ({exc.strerror or exc})") from None


def write_output(path: Path, content: str | bytes, flag: str) -> None:
    """Write `content` to `path`, as -o and its kin do (see `writing`). A file this call
    created is removed again when the write fails, so it leaves nothing behind."""
    created = not path.exists()
    try:
        with writing(f"{flag} {shown(str(path))}"):
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
    except SpecError:
        if created:
            path.unlink(missing_ok=True)
        raise
