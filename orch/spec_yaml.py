"""Reading a user's YAML file so that no content can break orch: bytes → text → documents.

PyYAML on its own lets a file crash the CLI or hang it: a file that is not UTF-8 raises
UnicodeDecodeError, ``[[[[…`` thousands deep a RecursionError in its recursive composer, an
alias bomb (``&a [*a, *a …]`` nested) builds a structure whose walk never ends, and a
duplicate key silently keeps the last value. Here every such file is refused with a
:class:`SpecError` naming the file, the place (line, field path) and the limit:

* text: UTF-8 (a BOM is fine), or UTF-16/UTF-32 with a BOM; anything else is refused with
  the first bad byte and its line and column;
* at most :data:`MAX_BYTES` bytes, :data:`MAX_DEPTH` levels of nesting, :data:`MAX_VALUES`
  nodes once aliases are expanded (and no alias inside itself);
* no key twice in one mapping (the message names the key path and both lines).

The depth is checked on PyYAML's event stream (its parser is iterative) before anything is
composed, so the recursive parts only ever see shallow documents.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Any

import yaml

from orch.local_paths import DIRECTORY, FILE, MISSING, OTHER, path_kind
from orch.spec_errors import SpecError, field_path, shorten

MAX_BYTES = 1024 * 1024  # a task YAML is a few KB; 1 MiB leaves room for long scripts
MAX_DEPTH = 64
MAX_VALUES = 100_000
# libyaml when PyYAML was built with it (about ten times faster); both parse iteratively.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_BOMS = (  # UTF-32 first: its little-endian BOM starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)


def read_text(path: str | Path, source: str) -> str:
    """The text of a file the user names (a task YAML, an env file, the config), or a
    SpecError saying why it is not a text file orch reads."""
    file = Path(path)
    kind = path_kind(file)  # "other" (a pipe: --env-file <(…)) is read, up to the limit
    if kind not in (FILE, OTHER):
        raise SpecError(source, [("", "is a directory, not a file" if kind == DIRECTORY
                                  else "no such file" if kind == MISSING else f"is {kind}")])
    try:
        size = file.stat().st_size
        if size > MAX_BYTES:
            raise SpecError(source, [("", f"the file has {size:,} bytes; at most "
                                          f"{MAX_BYTES:,} (1 MiB) are read")])
        with file.open("rb") as stream:  # a file that grows (a FIFO, /proc) stops here
            data = stream.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise SpecError(source, [("", f"more than {MAX_BYTES:,} bytes (1 MiB)")])
    except OSError as exc:
        raise SpecError(source, [("", f"cannot be read: {exc.strerror or exc}")]) from None
    return decode(data, source)


def decode(data: bytes, source: str) -> str:
    """UTF-8 (with or without a BOM), or UTF-16/32 with a BOM."""
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        if encoding != "utf-8":
            raise SpecError(source, [("", f"not valid {encoding.upper()} text (it starts "
                                          f"with a {encoding.upper()} byte order mark)")]
                            ) from None
        before = data[:exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        kind = "a binary file, " if b"\0" in data[:8192] else ""
        raise SpecError(source, [("", f"{kind}not UTF-8 text (byte 0x{data[exc.start]:02x} "
                                      f"at line {line} column {column})")]) from None


def load_documents(text: str, source: str) -> list[Any]:
    """The YAML documents of ``text`` (empty ones dropped), within the limits above."""
    return [document for document, _ in located_documents(text, source)]


def located_documents(text: str, source: str) -> list[tuple[Any, dict[str, int]]]:
    """Each non-empty document with the line of each key, by field path (``resources.cpus``
    → 3), for messages that say where a field is written."""
    try:
        _check_depth(text, source)
        loader = _LOADER(text)
        try:
            documents = []
            while loader.check_node():
                node = loader.get_node()
                lines: dict[str, int] = {}
                if node is not None:
                    _check_node(node, source, lines)
                documents.append((loader.construct_document(node), lines))
        finally:
            loader.dispose()  # type: ignore[no-untyped-call]
    except yaml.YAMLError as exc:
        raise SpecError(source, [("", f"not valid YAML: {shorten(str(exc), 400)}")]) from None
    except RecursionError:  # a last guard: the limits above should keep it from happening
        raise SpecError(source, [("", "the YAML is nested too deeply")]) from None
    return [(d, lines) for d, lines in documents if d is not None]


def load_yaml_file(path: str | Path, source: str | None = None
                   ) -> list[tuple[Any, dict[str, int]]]:
    """``read_text`` then ``located_documents``: the documents of a user's YAML file."""
    where = source or str(path)
    return located_documents(read_text(path, where), where)


def with_lines(err: SpecError, lines: dict[str, int], prefix: str) -> SpecError:
    """``err`` with the line of each problem whose field (less ``prefix``) or nearest
    enclosing field is a key of the document."""
    found = {}
    for field, _ in err.problems:
        path = field.removeprefix(prefix)
        ends = [len(path), *(m.start() for m in reversed(list(re.finditer(r"[.\[]", path))))]
        line = next((lines[path[:end]] for end in ends if path[:end] in lines), None)
        if line is not None:
            found[field] = line
    return type(err)(err.source, err.problems, lines=found)


def _check_depth(text: str, source: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise SpecError(source, [("", f"line {line}: nested more than {MAX_DEPTH} "
                                              "levels deep")])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_node(root: yaml.Node, source: str, lines: dict[str, int]) -> None:
    """Duplicate keys, aliases inside themselves, and the size once aliases are expanded;
    ``lines`` gets the line of each key, by field path."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, path: list[str | int]) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            line = node.start_mark.line + 1
            raise SpecError(source, [(field_path(path), f"line {line}: an alias refers to "
                                                        "the node that contains it")])
        active.add(key)
        total = 1
        for child, child_path in _children(node, path, source, lines):
            total += size(child, child_path)
            if total > MAX_VALUES:
                raise SpecError(source, [(field_path(path), f"more than {MAX_VALUES:,} values "
                                                            "once aliases (*name) are expanded")])
        active.discard(key)
        sizes[key] = total
        return total

    size(root, [])


def _children(node: yaml.Node, path: list[str | int], source: str, lines: dict[str, int]
              ) -> list[tuple[yaml.Node, list[str | int]]]:
    """The nodes inside ``node`` with their field paths; a key seen twice is refused."""
    if isinstance(node, yaml.SequenceNode):
        return [(item, [*path, i]) for i, item in enumerate(node.value)]
    if not isinstance(node, yaml.MappingNode):
        return []
    seen: dict[tuple[str, str], int] = {}
    children = []
    for key, value in node.value:
        name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
        child: list[str | int] = [*path, shorten(name, 80)]
        line = key.start_mark.line + 1
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            if (key.tag, name) in seen:
                first = seen[key.tag, name]
                shown = shorten(name, 80)
                raise SpecError(source, [(field_path(child), f"the key {shown!r} is given "
                                                             f"twice (lines {first} and {line})")])
            seen[key.tag, name] = line
            lines.setdefault(field_path(child), line)
        children += [(key, child), (value, child)]
    return children
