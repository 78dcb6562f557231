"""Safe YAML loading that remembers the line of every mapping key (for error messages)."""
from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from ddprobe.errors import ConfigError

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict[Any, Any]):
    """A dict that knows the 1-based line of each key and of itself."""

    line: int = 0
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return self.key_lines.get(key, self.line)


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    d = LineDict()
    d.line = node.start_mark.line + 1
    d.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):  # `{[1]: x}`, `? {a: 1}`: YAML allows, a dict not
            raise ConfigError("a mapping key must be a scalar, not a list or mapping",
                              path=getattr(loader, "_path", None),
                              line=key_node.start_mark.line + 1)
        if key in d:
            raise ConfigError(f"duplicate key '{key}'", path=getattr(loader, "_path", None),
                              line=key_node.start_mark.line + 1, key=str(key))
        d[key] = loader.construct_object(value_node, deep=True)
        d.key_lines[key] = key_node.start_mark.line + 1
    return d


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path | str, text: str | None = None) -> Any:
    """Load a YAML file; syntax errors become ConfigError with file and line."""
    p = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError("file not found", path=p) from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"not UTF-8 text (byte {e.start})", path=p) from None
        except OSError as e:
            raise ConfigError(f"cannot read: {e.strerror}", path=p) from None
    if len(text) > MAX_YAML_CHARS:
        raise ConfigError(f"file larger than {MAX_YAML_CHARS >> 20} MiB", path=p)
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as e:  # a control character: refused before any parsing
        raise ConfigError(f"YAML cannot hold the character {e.character:#x} ({e.reason})",
                          path=p, line=text.count("\n", 0, max(0, e.position)) + 1) from None
    loader._path = p  # type: ignore[attr-defined]
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, p)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(f"YAML syntax error: {e.problem or e.context}", path=p,
                          line=line) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"YAML error: {e}", path=p) from None
    except ValueError as e:  # a scalar the constructor refuses: an int of 5,000 digits
        raise ConfigError(f"YAML value that cannot be read ({str(e).split(':')[0]})",
                          path=p) from None
    except RecursionError:
        raise ConfigError(f"YAML nested deeper than {MAX_DEPTH} levels", path=p,
                          line=getattr(loader, "line", -1) + 1 or None) from None
    finally:
        loader.dispose()


MAX_YAML_CHARS = 4 << 20
MAX_NODES = 100_000  # after aliases are expanded: a "billion laughs" document is refused
MAX_DEPTH = 100


def _check_size(root: yaml.Node, path: str) -> None:
    """Refuse a document whose aliases expand it past MAX_NODES, or nested past MAX_DEPTH
    (both before anything is built from it), naming the line."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"YAML nested deeper than {MAX_DEPTH} levels", path=path,
                              line=node.start_mark.line + 1)
        kids = _children(node)
        if done:
            sizes[id(node)] = 1 + sum(sizes[id(k)] for k in kids)
            if sizes[id(node)] > MAX_NODES:
                raise ConfigError(f"YAML expands to more than {MAX_NODES} values (aliases "
                                  "that repeat each other?)", path=path,
                                  line=node.start_mark.line + 1)
            continue
        if id(node) in sizes:
            continue
        stack.append((node, depth, True))
        for k in kids:
            if id(k) not in sizes:
                stack.append((k, depth + 1, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def line_of(obj: Any, key: Any = None) -> int | None:
    if isinstance(obj, LineDict):
        return obj.line_of(key) if key is not None else obj.line
    return None
