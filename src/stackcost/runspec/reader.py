"""A sweep spec's YAML, read within bounds: size, encoding, nesting, and values once
aliases expand.

A spec is a short hand-written file. Unbounded, a "billion laughs" document (aliases
of aliases, 10^9 values from a few lines) ran for minutes into a MemoryError, deep
nesting crashes libyaml's composer, and a 50 MB list ran for minutes in silence. The
bounds are checked on the event stream, which costs time linear in the text, before
anything is composed or expanded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from stackcost.clip import one_line, shown
from stackcost.errors import SpecError

MAX_SPEC_BYTES = 1 << 20  # 1 MiB: the shipped examples are under 2 KiB
MAX_DEPTH = 32  # nested collections; a spec needs 4
MAX_VALUES = 100_000  # scalars and collections, each alias counted as what it expands to

# libyaml when PyYAML has it: faster, and the bounds below keep its recursion shallow.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_spec_text(path: Path) -> str:
    """The file's text; SpecError when it is missing, a directory, too large or not UTF-8."""
    name = shown(str(path))
    if path.is_dir():
        raise SpecError(f"spec file {name} is a directory (expected a YAML file)")
    if not path.exists():
        raise SpecError(f"spec file {name} does not exist")
    try:
        with path.open("rb") as f:  # at most one byte past the limit: /dev/zero ends too
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"spec file {name} cannot be read ({exc.strerror})") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(
            f"spec file {name} is larger than {MAX_SPEC_BYTES // 1024} KiB, "
            "the most a sweep spec may be (it is a short YAML file)"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"spec file {name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}): a sweep spec is a YAML file"
        ) from None


def load_bounded(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for line numbers) and its data.

    Raises SpecError past a bound, yaml.YAMLError when the text is not valid YAML.
    """
    check_bounds(text, source)
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        try:
            return node, loader.construct_document(node)
        except (ValueError, OverflowError) as exc:  # a 5000-digit int, a 30th of February
            line = f"{source}:{node.start_mark.line + 1}"
            raise SpecError(f"{line}: a value cannot be read ({one_line(str(exc), 100)})") from None
    finally:
        loader.dispose()


def check_bounds(text: str, source: str) -> None:
    """Walk the events once, counting values as if every alias were expanded."""
    loader = Loader(text)
    try:
        expanded: dict[str, int] = {}  # anchor -> how many values its node expands to
        open_: list[tuple[str | None, int]] = []  # (anchor, count at its start) per collection
        count, aliases = 0, False
        while (event := loader.get_event()) is not None:
            line = f"{source}:{event.start_mark.line + 1}"
            if isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for anchor, _ in open_):
                    raise SpecError(
                        f"{line}: alias *{shown(event.anchor, 40)[1:-1]} refers to a "
                        "collection that holds it: recursive aliases are not allowed"
                    )
                count += expanded.get(event.anchor, 1)  # undefined: the composer says so
                aliases = True
            elif isinstance(event, yaml.ScalarEvent):
                count += 1
                if event.anchor is not None:
                    expanded[event.anchor] = 1
            elif isinstance(event, yaml.CollectionStartEvent):
                if len(open_) >= MAX_DEPTH:
                    raise SpecError(
                        f"{line}: nested more than {MAX_DEPTH} levels deep "
                        "(a sweep spec needs a few)"
                    )
                open_.append((event.anchor, count))
                count += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, start = open_.pop()
                if anchor is not None:
                    expanded[anchor] = count - start
            if count > MAX_VALUES:
                how = " once its aliases are expanded" if aliases else ""
                raise SpecError(
                    f"{line}: the spec holds more than {MAX_VALUES} values{how} "
                    "(a sweep spec is a short file; a 'billion laughs' document is refused)"
                )
    finally:
        loader.dispose()


def load_mapping(path: Path, source: str, what: str) -> tuple[dict[str, Any], dict[tuple, int]]:
    """A spec file's mapping and the line of every key path in it; SpecError (file:line)
    on unreadable text, invalid YAML, or a document that is not a mapping."""
    text = read_spec_text(path)
    try:
        node, data = load_bounded(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = one_line(str(getattr(exc, "problem", None) or exc), 120)
        raise SpecError(f"{source}{line}: not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}:1: {what} is a mapping with at least a 'models' key")
    return data, key_lines(node) if node is not None else {}


def key_lines(node: yaml.Node, path: tuple = ()) -> dict[tuple, int]:
    """Every key path in the document -> its 1-based line."""
    out = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out.update(key_lines(value, (*path, key.value)))
            out[(*path, key.value)] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(key_lines(item, (*path, i)))
    return out
