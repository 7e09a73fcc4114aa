"""The Pareto frontier over cases (improve/frontier.py): dominance, a member best on one case
kept though its mean is lower, dominated members dropped, parents drawn by cases won, and
merge taking each surface from the member that wins."""

from __future__ import annotations

import random
from collections import Counter

from armature_temporal.improve.frontier import (
    Member,
    changes_key,
    dominates,
    frontier,
    merge,
    merge_pair,
    sample_parent,
    solved,
    wins,
)
from armature_temporal.improve.models import SpecChange


def _change(surface: str, new: object) -> SpecChange:
    stage, _, field = surface.partition(".")
    return SpecChange(stage=stage, field=field, new=new, why="test")  # type: ignore[arg-type]


def _m(mid: str, scores: list[float | None], *changes: SpecChange) -> Member:
    return Member(id=mid, scores=scores, changes=list(changes))


def test_dominates_needs_at_least_as_good_everywhere_and_better_somewhere() -> None:
    assert dominates(_m("a", [1, 0.5]), _m("b", [1, 0]))
    assert not dominates(_m("a", [1, 0.5]), _m("b", [1, 0.5]))
    assert not dominates(_m("a", [1, 0]), _m("b", [0, 1]))
    assert dominates(_m("a", [0.5, 0]), _m("b", [None, 0]))  # ungraded counts as 0


def test_a_member_best_on_one_case_is_kept_though_its_mean_is_lower() -> None:
    strong = _m("strong", [1.0, 1.0, 0.0])
    niche = _m("niche", [0.0, 0.0, 1.0])
    dominated = _m("dominated", [0.5, 0.5, 0.0])
    front = frontier([dominated, strong, niche])
    assert niche.mean < strong.mean
    assert [m.id for m in front] == ["strong", "niche"]


def test_a_member_dominated_on_every_case_is_dropped_even_if_it_ties_the_best_on_one() -> None:
    best = _m("best", [1.0, 1.0])
    tie = _m("tie", [1.0, 0.5])  # wins case 0 (a tie) but best is better on case 1
    assert wins([best, tie]) == {"best": [0, 1], "tie": [0]}
    assert [m.id for m in frontier([best, tie])] == ["best"]


def test_equal_members_keep_the_first_and_a_case_nobody_passes_is_won_by_nobody() -> None:
    a, b = _m("a", [1.0, 0.0]), _m("b", [1.0, 0.0])
    assert wins([a, b]) == {"a": [0], "b": [0]}
    assert [m.id for m in frontier([a, b])] == ["a"]
    assert [m.id for m in frontier([_m("x", [0.0]), _m("y", [0.0])])] == ["x"]


def test_parents_are_drawn_in_proportion_to_cases_won() -> None:
    front = [_m("three", [1, 1, 1, 0]), _m("one", [0, 0, 0, 1])]
    rng = random.Random(7)
    drawn = Counter(sample_parent(front, rng).id for _ in range(4000))
    assert abs(drawn["three"] / 4000 - 0.75) < 0.03
    # Seeded: the same seed draws the same parents.
    first = [sample_parent(front, random.Random(3)).id for _ in range(5)]
    assert first == [sample_parent(front, random.Random(3)).id for _ in range(5)]


def test_merge_takes_each_surface_from_the_member_that_changed_it_or_wins_more() -> None:
    a = _m(
        "a",
        [1.0, 1.0, 0.0],
        _change("draft.description", "A's words"),
        _change("draft.model_tier", "frontier"),
    )
    b = _m(
        "b",
        [0.0, 0.0, 1.0],
        _change("review.description", "B's words"),
        _change("draft.model_tier", "medium"),
    )
    won = wins([a, b])
    merged = {c.surface: c.new for c in merge(a, b, won)}
    assert merged == {
        "draft.description": "A's words",  # only a changed it
        "review.description": "B's words",  # only b changed it
        "draft.model_tier": "frontier",  # both did: a wins 2 cases, b 1
    }
    assert {c.surface: c.new for c in merge(b, a, won)}["draft.model_tier"] == "frontier"


def test_merge_pair_needs_members_winning_different_cases_and_a_new_combination() -> None:
    a = _m("a", [1.0, 0.0], _change("draft.description", "x"))
    b = _m("b", [0.0, 1.0], _change("review.description", "y"))
    c = _m("c", [1.0, 0.0], _change("draft.model_tier", "frontier"))
    rng = random.Random(1)
    pair = merge_pair([a, b], rng, set())
    assert pair is not None and {pair[0].id, pair[1].id} == {"a", "b"}
    done = {changes_key(merge(a, b, wins([a, b])))}
    assert merge_pair([a, b], rng, done) is None  # already tried
    assert merge_pair([a, c], rng, set()) is None  # both win the same case only


def test_solved_when_one_member_passes_every_case_every_time() -> None:
    assert not solved([_m("a", [1.0, 0.0]), _m("b", [0.0, 1.0])])  # complementary: merge them
    assert not solved([_m("a", [1.0, 0.67])])
    assert solved([_m("a", [0.0, 0.0]), _m("b", [1.0, 1.0])])
