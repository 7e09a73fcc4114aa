"""YAML read within bounds: a byte cap on the document and on what its aliases expand to.

An alias (``*name``) stands for its anchor's whole value, so anchors whose values hold aliases
multiply: a few hundred bytes nine levels deep ("billion laughs") expand to 9**9 values, and
everything that walks the loaded document (the loader, pydantic, diffs) pays for each one.
ruamel itself shares the anchored object, so the blow-up only comes later, unbounded. Here the
composer weighs every node as it is composed (its nodes and its scalar characters, aliases
counted at their full expanded weight) and refuses the document at the alias that crosses a
bound, before anything is constructed. An alias of an anchor that is still open (one that
contains itself) is refused too: its expansion never ends. So is nesting deeper than
:data:`MAX_NESTING` levels: ruamel's scanner takes time quadratic in the depth of flow
collections (``[[[[…``: 3,000 levels took 3 s, a 2 MiB document would take hours) and its
composer ends deep documents in a ``RecursionError``.
"""

from __future__ import annotations

from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.scanner import RoundTripScanner, Scanner

__all__ = [
    "MAX_ALIAS_CHARS",
    "MAX_ALIAS_NODES",
    "MAX_NESTING",
    "YAMLLimitError",
    "bounded_yaml",
    "text_bytes",
]

#: Nodes that aliases may add to a document, beyond its own (shared tier configs and
#: roles use a few dozen).
MAX_ALIAS_NODES = 10_000
#: Characters of scalar text that aliases may repeat (as much as a spec file may hold).
MAX_ALIAS_CHARS = 2 * 1024 * 1024
#: Levels of nested mappings and lists (a deep JSON Schema uses a few dozen).
MAX_NESTING = 100

_FIX = (
    "an alias (*name) repeats its anchor's whole value, so anchors whose values hold aliases "
    "multiply; write the repeated values out, or alias fewer and smaller pieces"
)


class YAMLLimitError(MarkedYAMLError):
    """A YAML document breaks a bound; ``problem`` says which and how to fix it, and
    ``problem_mark`` (when there is one) is where: the alias that crossed it."""


def text_bytes(text: str) -> int:
    """UTF-8 size of ``text`` (lone surrogates count as three bytes, as they would be stored)."""
    return len(text.encode("utf-8", "surrogatepass"))


def bounded_yaml(typ: Literal["rt", "safe"], max_bytes: int) -> YAML:
    """A ruamel ``YAML`` whose ``load`` refuses text over ``max_bytes`` and alias bombs.

    Raises (from ``load``):
        YAMLLimitError: The text is too large, aliases expand past :data:`MAX_ALIAS_NODES`
            nodes or :data:`MAX_ALIAS_CHARS` characters, or an alias is recursive.
    """
    yaml = _BoundedYAML(typ=typ, pure=True)  # pure: the C parser would bring its own composer
    yaml.Composer = _BoundedComposer
    yaml.Scanner = _BoundedRoundTripScanner if typ == "rt" else _BoundedScanner
    yaml.max_bytes = max_bytes
    return yaml


class _BoundedYAML(YAML):
    max_bytes: int = 0

    def load(self, stream: Any) -> Any:
        if isinstance(stream, str) and self.max_bytes:
            # More characters than the cap is over it without encoding a huge text.
            size = len(stream) if len(stream) > self.max_bytes else text_bytes(stream)
            if size > self.max_bytes:
                raise YAMLLimitError(
                    problem=f"the document is {size} bytes; the limit is {self.max_bytes} bytes "
                    "(split it, or move long texts into files it references)"
                )
        return super().load(stream)


def _too_deep(mark: Any) -> YAMLLimitError:
    return YAMLLimitError(
        problem=f"the document nests deeper than {MAX_NESTING} levels of mappings and lists; "
        "flatten it",
        problem_mark=mark,
    )


class _BoundedScanner(Scanner):
    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        if len(self.flow_context) >= MAX_NESTING:
            raise _too_deep(self.reader.get_mark())
        super().fetch_flow_collection_start(TokenClass, to_push)


class _BoundedRoundTripScanner(RoundTripScanner):
    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        if len(self.flow_context) >= MAX_NESTING:
            raise _too_deep(self.reader.get_mark())
        super().fetch_flow_collection_start(TokenClass, to_push)


class _BoundedComposer(Composer):
    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader=loader)
        self._reset()

    def _reset(self) -> None:
        #: id(node) -> (nodes, scalar characters) it expands to; set once the node is complete.
        self._weights: dict[int, tuple[int, int]] = {}
        self._extra_nodes = 0
        self._extra_chars = 0

    def compose_document(self) -> Any:
        self._reset()
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if not self.parser.check_event(AliasEvent):
            if self.depth >= MAX_NESTING:  # block nesting (flow nesting stops in the scanner)
                raise _too_deep(self.parser.peek_event().start_mark)
            node = super().compose_node(parent, index)
            self._weights[id(node)] = self._weigh(node)
            return node
        event = self.parser.peek_event()
        target = self.anchors.get(event.anchor)
        if target is not None:  # an undefined alias: ruamel reports it below
            weight = self._weights.get(id(target))
            if weight is None:
                raise YAMLLimitError(
                    problem=f"recursive YAML alias *{event.anchor}: the anchor "
                    f"&{event.anchor} contains itself, so it never ends; write the value out",
                    problem_mark=event.start_mark,
                )
            self._extra_nodes += weight[0]
            self._extra_chars += weight[1]
            if self._extra_nodes > MAX_ALIAS_NODES:
                raise YAMLLimitError(
                    problem=f"this document expands through YAML aliases to {self._extra_nodes} "
                    f"more nodes at *{event.anchor} (limit {MAX_ALIAS_NODES}): {_FIX}",
                    problem_mark=event.start_mark,
                )
            if self._extra_chars > MAX_ALIAS_CHARS:
                raise YAMLLimitError(
                    problem=f"YAML aliases in this document repeat {self._extra_chars} characters "
                    f"of text at *{event.anchor} (limit {MAX_ALIAS_CHARS}): {_FIX}",
                    problem_mark=event.start_mark,
                )
        return super().compose_node(parent, index)

    def _weigh(self, node: Any) -> tuple[int, int]:
        """A complete node's expanded weight, from its children's (each already weighed)."""
        if isinstance(node, ScalarNode):
            return 1, len(node.value)
        children: list[Any] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        nodes, chars = 1, 0
        for child in children:
            child_nodes, child_chars = self._weights.get(id(child), (1, 0))
            nodes += child_nodes
            chars += child_chars
        return nodes, chars
