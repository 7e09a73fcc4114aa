"""Apply :class:`SpecChange` edits to a spec's YAML text, touching only the lines they change.

The spec is round-tripped with ruamel.yaml (comments, quotes, flow mappings and block scalars
survive), with the document's own indentation, found by trying the common layouts. ruamel
reproduces most files exactly (every spec in specs/ does), but not all: it normalises some
spacing (``key:   value``, ``{ a: 1 }``), drops a ``---`` line and writes one indentation style
per document. So the result is not ruamel's whole output. Only the lines in which ruamel's
output of the edited document differs from its output of the unedited one are spliced into the
original text; every other line stays exactly as it was written. The spliced text is parsed
again and must equal the edited document; where it does not, or a changed line has no exact
counterpart in the original, the whole ruamel output is used instead (equivalent YAML, with
the layout normalised). Either way the result is loaded and compiled before it is returned.
"""

from __future__ import annotations

import difflib
import hashlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import LiteralScalarString

from armature_temporal.errors import ArmatureError, did_you_mean
from armature_temporal.improve.models import SpecChange
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import MAX_SPEC_BYTES, load_spec_text
from armature_temporal.spec.yaml_limits import bounded_yaml

__all__ = ["EditError", "apply_changes", "text_hash", "unified_diff"]

#: Wide enough that ruamel never re-wraps a long line.
_WIDTH = 1 << 30

#: (mapping, sequence, offset) layouts tried, most common first; see :func:`_layout`.
_LAYOUTS: tuple[tuple[int, int, int], ...] = (
    (2, 4, 2),
    (2, 2, 0),
    (4, 4, 2),
    (4, 6, 4),
    (4, 2, 0),
    (4, 4, 0),
)

#: Role keys in the order a spec usually lists them; a missing key is added after the last
#: of those before it (``description`` aside: it is usually a block, and goes last).
_ROLE_ORDER = ("name", "type", "description", "model_tier", "temperature", "max_tokens")


class EditError(ArmatureError):
    """A proposed change cannot be applied to the spec text.

    The message names the stage, the field and the value, and says what to do.
    """


def apply_changes(
    spec_text: str,
    changes: Sequence[SpecChange],
    *,
    filename: str = "<spec>",
    base_dir: Path | None = None,
) -> str:
    """Return ``spec_text`` with each change's ``stages[id].role.<field>`` set to its ``new``.

    Every change's ``old`` must equal the value in the text now (``None``: the key is absent);
    ``new=None`` removes the key. Lines the changes do not touch are kept byte for byte.

    Raises:
        EditError: A change names no stage, a stage without a role, a role shared through a
            YAML alias, or a field whose value is no longer ``old``.
        SpecError: The text is not a valid spec, or the changed text would not be one (e.g. a
            ``model_tier`` the spec does not define). The message locates the problem.
    """
    doc = _parse(spec_text, filename, base_dir)
    layout = _layout(doc, spec_text)
    before = _dump(doc, layout)

    stages = doc.get("stages") if isinstance(doc, CommentedMap) else None
    if not isinstance(stages, list):
        raise EditError(f"{filename}: there is no `stages:` list to change; is it a spec?")
    seen: set[str] = set()
    targets: list[tuple[SpecChange, CommentedMap]] = []
    knowledge_targets: list[tuple[SpecChange, CommentedMap]] = []
    for change in changes:
        if change.surface in seen:
            raise EditError(
                f"{filename}: two changes set {change.surface}; "
                "a proposal may change each field of a stage once"
            )
        seen.add(change.surface)
        if change.stage == "knowledge" and change.field == "sources":
            knowledge_targets.append((change, _knowledge_of(doc, change, filename)))
            continue
        index, role = _find_role(doc, stages, change, filename)
        current = role.get(change.field)
        if not _same(current, change.old):
            raise EditError(
                f"{filename}: the spec changed since the proposal was made: "
                f"stages[{index}] ({change.stage}).role.{change.field} is {_show(current)}, "
                f"the proposal expected {_show(change.old)}; run `armature improve` again"
            )
        targets.append((change, role))
    for change, role in targets:
        _set(role, change.field, change.new)
        if isinstance(change.new, str) and "\n" in change.new:
            # A | block cannot sit inside a flow mapping ({...}): make its holders blocks.
            stage = next(s for s in stages if isinstance(s, dict) and s.get("role") is role)
            holders: tuple[Any, ...] = (stages, stage, role)
            for node in holders:
                node.fa.set_block_style()

    for change, knowledge in knowledge_targets:
        current = knowledge.get("sources")
        if isinstance(current, CommentedSeq):  # in place: keeps its flow or block style
            current.clear()
            current.extend(change.new)
        else:
            knowledge.insert(0, "sources", list(change.new))

    after = _dump(doc, layout)
    new_text = _splice(spec_text, before, after)
    if new_text is None or not _same_document(new_text, after):
        new_text = after
    compile_spec(load_spec_text(new_text, filename, base_dir=base_dir))
    return new_text


def unified_diff(old_text: str, new_text: str, path: str) -> str:
    """A ``git diff``-style unified diff (``a/<path>``, ``b/<path>``, 3 lines of context)."""
    if old_text == new_text:
        return ""
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
        n=3,
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def text_hash(text: str) -> str:
    """sha256 of the UTF-8 text, hex: checks that a file is still the text a proposal read."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- reading and writing the document ---------------------------------------------------


def _yaml(layout: tuple[int, int, int] | None) -> YAML:
    yaml = bounded_yaml("rt", MAX_SPEC_BYTES)  # a stored text is input too: alias bombs refused
    yaml.preserve_quotes = True
    yaml.width = _WIDTH
    if layout is not None:
        mapping, sequence, offset = layout
        yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _parse(text: str, filename: str, base_dir: Path | None) -> Any:
    try:
        return _yaml(None).load(text)
    except Exception:  # ruamel raises many types on bad input; the loader explains them all
        load_spec_text(text, filename, base_dir=base_dir)  # raises SpecError
        raise


def _dump(doc: Any, layout: tuple[int, int, int]) -> str:
    out = io.StringIO()
    _yaml(layout).dump(doc, out)
    return out.getvalue()


def _layout(doc: Any, text: str) -> tuple[int, int, int]:
    """The indentation that reproduces ``text`` exactly, or failing that most of its lines."""
    target = text.split("\n")
    best, best_score = _LAYOUTS[0], -1
    for layout in _LAYOUTS:
        out = _dump(doc, layout)
        if out == text:
            return layout
        matcher = difflib.SequenceMatcher(None, out.split("\n"), target, autojunk=False)
        score = sum(block.size for block in matcher.get_matching_blocks())
        if score > best_score:
            best, best_score = layout, score
    return best


def _lines(text: str) -> list[str]:
    """Lines with their ``\\n`` (only ``\\n`` splits: YAML text may hold other breaks)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _bare(line: str) -> str:
    return line.rstrip("\r\n")


def _splice(text: str, before: str, after: str) -> str | None:
    """``text`` with the lines in which ``after`` differs from ``before`` replaced.

    ``before`` is ruamel's output of ``text`` unedited and ``after`` of it edited. Each changed
    run of ``before`` lines must have a counterpart in ``text``, line for line and in one
    piece; None if one has not. The caller checks that the result means ``after``.
    """
    orig, base, new = _lines(text), _lines(before), _lines(after)
    base_bare = [_bare(line) for line in base]
    # base line -> original line: where ruamel reproduced the line, or rewrote a run of lines
    # one for one (it normalised their spacing, say)
    where: dict[int, int] = {}
    aligned = difflib.SequenceMatcher(None, base_bare, [_bare(x) for x in orig], autojunk=False)
    for tag, i1, i2, j1, j2 in aligned.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for k in range(i2 - i1):
                where[i1 + k] = j1 + k
    newline = "\r\n" if "\r\n" in text else "\n"
    out: list[str] = []
    done = 0  # original lines copied or replaced so far
    edits = difflib.SequenceMatcher(None, base_bare, [_bare(x) for x in new], autojunk=False)
    for tag, i1, i2, j1, j2 in edits.get_opcodes():
        if tag == "equal":
            continue
        if i1 < i2:
            if any(k not in where for k in range(i1, i2)):
                return None
            start, end = where[i1], where[i2 - 1] + 1
            if end - start != i2 - i1:
                return None
        elif i1 - 1 in where:
            start = end = where[i1 - 1] + 1
        elif i1 in where:
            start = end = where[i1]
        else:
            return None
        if start < done:
            return None
        out.extend(orig[done:start])
        added = [_bare(line) + newline for line in new[j1:j2]]
        if end == len(orig) and added and orig and not orig[-1].endswith("\n"):
            added[-1] = _bare(added[-1])  # the original's last line had no line break
        out.extend(added)
        done = end
    out.extend(orig[done:])
    return "".join(out)


def _same_document(text: str, expected: str) -> bool:
    """Whether two texts parse to the same YAML data (key order included)."""
    try:
        return bool(_data(_yaml(None).load(text)) == _data(_yaml(None).load(expected)))
    except Exception:  # unreadable or recursive: not the same, use the expected text
        return False


def _data(node: Any) -> Any:
    if isinstance(node, dict):
        return [(key, _data(value)) for key, value in node.items()]
    if isinstance(node, list):
        return [_data(value) for value in node]
    return node


# --- finding and setting a role field ---------------------------------------------------


def _find_role(
    doc: Any, stages: list[Any], change: SpecChange, filename: str
) -> tuple[int, CommentedMap]:
    ids = [str(s.get("id")) for s in stages if isinstance(s, dict)]
    index = next(
        (i for i, s in enumerate(stages) if isinstance(s, dict) and s.get("id") == change.stage),
        None,
    )
    if index is None:
        raise EditError(
            f"{filename}: no stage has id {change.stage!r}{did_you_mean(change.stage, ids)}; "
            f"its stages are: {', '.join(ids) or '(none)'}. The proposal was made for another "
            "version of this spec; run `armature improve` again"
        )
    stage = stages[index]
    where = f"stages[{index}] ({change.stage})"
    role = stage.get("role")
    if role is None:
        if "tool" in stage:
            kind = "a tool stage"
        elif "subagent_spec" in stage:
            kind = "a fan-out stage (subagent_spec)"
        elif "gate" in stage:
            kind = "an approval gate"
        else:
            kind = "a stage without a role"
        raise EditError(
            f"{filename}: {where} is {kind}, not an LLM stage: it has no `role:`, so there is "
            f"no role.{change.field} to change. Only stages with a role take description, "
            "model_tier, temperature and max_tokens; drop this change"
        )
    if not isinstance(role, CommentedMap):
        raise EditError(
            f"{filename}: {where}.role is not a mapping; write it as `role: {{name: ..., "
            "description: ...}}` before changing its fields"
        )
    if _references(doc, role) > 1:
        raise EditError(
            f"{filename}: {where}.role is a YAML anchor that other places use through an "
            f"alias, so changing its {change.field} here would change them too; write the "
            "role out in full for this stage, then run `armature improve` again"
        )
    return index, role


def _knowledge_of(doc: Any, change: SpecChange, filename: str) -> CommentedMap:
    """The spec's ``knowledge:`` mapping, its ``sources`` checked against the change's old."""
    knowledge = doc.get("knowledge")
    if not isinstance(knowledge, CommentedMap):
        raise EditError(
            f"{filename}: the spec has no `knowledge:` mapping, so there are no knowledge.sources "
            "to change; the proposal was made for another version of it: run `armature "
            "improve` again"
        )
    current = knowledge.get("sources")
    current_list = [current] if isinstance(current, str) else list(current or [])
    if current_list != list(change.old or []):
        raise EditError(
            f"{filename}: the spec changed since the proposal was made: knowledge.sources is "
            f"{current_list}, the proposal expected {list(change.old or [])}; run `armature "
            "improve` again"
        )
    if isinstance(current, str):  # a single source written as a string: make it a list
        knowledge["sources"] = CommentedSeq([current])
        knowledge["sources"].fa.set_flow_style()
    return knowledge


def _references(doc: Any, target: Any) -> int:
    """How many places in the document hold ``target`` itself (more than one: an alias)."""
    count = 0
    seen: set[int] = set()
    todo = [doc]
    while todo:
        node = todo.pop()
        children = list(node.values()) if isinstance(node, dict) else node
        for child in children:
            if child is target:
                count += 1
            if isinstance(child, dict | list) and id(child) not in seen:
                seen.add(id(child))
                todo.append(child)
    return count


def _same(current: Any, expected: Any) -> bool:
    if current is None or expected is None:
        return current is None and expected is None
    if isinstance(current, bool) or isinstance(expected, bool):
        return isinstance(current, bool) and isinstance(expected, bool) and current == expected
    if isinstance(current, int | float) and isinstance(expected, int | float):
        return float(current) == float(expected)
    if isinstance(current, str) and isinstance(expected, str):
        return str(current) == str(expected)
    return bool(current == expected)


def _show(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, str):
        text = repr(str(value))
        return text if len(text) <= 80 else text[:77] + "...'"
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return repr(int(value))
    return repr(value)


def _set(role: CommentedMap, field: str, new: Any) -> None:
    if new is None:
        if field in role:
            del role[field]
        return
    value = _styled(new)
    if field in role:
        role[field] = value
        return
    keys = list(role)
    before = [k for k in _ROLE_ORDER[: _ROLE_ORDER.index(field)] if k != "description"]
    position = max((keys.index(k) + 1 for k in before if k in role), default=0)
    role.insert(position, field, value)


def _styled(new: Any) -> Any:
    """Multi-line text as a ``|`` block. (ruamel itself keeps an existing value's style, its
    quotes or block, when a plain string replaces it.)"""
    if isinstance(new, str) and "\n" in new:
        return LiteralScalarString(new)
    return new
