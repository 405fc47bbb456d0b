"""PUCT tree: the score, the batch rule, duplicates, back-up, widening, dead ends, persistence."""

from __future__ import annotations

import json
import math

import pytest

from search_engine.candidates import make_candidate
from search_engine.tree import PUCTTree, TreeOptions


def cand(tag: str, body: str = "y[i] = x[i];"):
    src = f"__global__ void k(const float* x, float* y) {{ int i = threadIdx.x; {body} /* {tag} */ }}\n// {tag}"
    return make_candidate(src + f"\n#define TAG_{tag} 1", [{"kernel": "k", "grid": ["1"], "block": [32],
                                                               "shared": "0", "args": ["x", "y"]}])


def measured_child(tree, parent, tag, speedup):
    node = tree.add_child(parent, cand(tag))
    node.state = "measured"
    tree.set_measured(node.id, speedup)
    return node


def test_the_score_follows_the_puct_formula():
    tree = PUCTTree(TreeOptions(c=1.5))
    tree.add_root(cand("root"), 1.0)
    a = measured_child(tree, 0, "a", 2.0)
    b = measured_child(tree, 0, "b", 0.5)
    tree.record_expansion(0)
    tree.record_expansion(a.id)
    scores = tree.scores()
    # Ranked by reward: a (2.0) first, root (1.0), b (0.5): weights 3, 2, 1 over 6.
    priors = {a.id: 3 / 6, 0: 2 / 6, b.id: 1 / 6}
    scale = 2.0 - 0.5
    t = 2
    for nid, prior in priors.items():
        node = tree.nodes[nid]
        expected = node.best + 1.5 * scale * prior * math.sqrt(1 + t) / (1 + node.visits)
        assert scores[nid] == pytest.approx(expected)
    assert tree.nodes[0].best == 2.0  # Q of the root is the best reward below it
    assert tree.nodes[0].visits == 2 and tree.nodes[a.id].visits == 1


def test_a_batch_never_holds_two_nodes_on_one_ancestor_line():
    tree = PUCTTree(TreeOptions(c=0.1))
    tree.add_root(cand("root"), 1.0)
    a = measured_child(tree, 0, "a", 3.0)
    aa = measured_child(tree, a.id, "aa", 4.0)
    b = measured_child(tree, 0, "b", 2.0)
    chosen = tree.select(4)
    assert chosen[0] == aa.id
    for i, x in enumerate(chosen):
        for y in chosen[i + 1:]:
            assert not tree.on_one_line(x, y)
    assert set(chosen) == {aa.id, b.id}


def test_the_same_code_in_another_layout_is_a_duplicate():
    tree = PUCTTree()
    tree.add_root(cand("root"), 1.0)
    first = tree.add_child(0, cand("x"))
    reformatted = dict(cand("x"))
    reformatted["source"] = reformatted["source"].replace("; ", ";\n    ") + "\n// another comment"
    assert first is not None
    assert tree.add_child(0, reformatted) is None
    assert tree.duplicates == 1
    other_launch = cand("x")
    other_launch["launch"][0]["block"] = [64]
    assert tree.add_child(0, other_launch) is not None


def test_log_rewards_use_the_log_of_the_speedup():
    tree = PUCTTree(TreeOptions(log_rewards=True))
    tree.add_root(cand("root"), 1.0)
    node = measured_child(tree, 0, "a", 4.0)
    assert node.reward == pytest.approx(math.log(4.0))
    assert tree.root.reward == 0.0


def test_a_value_backs_up_and_a_cleared_value_backs_out():
    tree = PUCTTree()
    tree.add_root(cand("root"), 1.0)
    a = measured_child(tree, 0, "a", 1.5)
    aa = tree.add_child(a.id, cand("aa"))
    aa.state = "accepted-by-forecast"
    tree.set_provisional(aa.id, 3.0)
    assert tree.root.best == 3.0 and tree.nodes[a.id].best == 3.0
    tree.clear_value(aa.id)
    assert tree.root.best == 1.5 and tree.nodes[a.id].best == 1.5


def test_progressive_widening_limits_children_by_visits():
    tree = PUCTTree(TreeOptions(widening_k=2, widening_alpha=0.5))
    tree.add_root(cand("root"), 1.0)
    measured_child(tree, 0, "a", 1.0)
    assert tree.expandable(tree.root)  # 1 child < 2 * 1^0.5
    measured_child(tree, 0, "b", 1.0)
    assert not tree.expandable(tree.root)  # 2 children, 0 visits
    for _ in range(3):
        tree.record_expansion(0)
    assert tree.expandable(tree.root)  # ceil(2 * 4^0.5) = 4


def test_a_node_whose_children_keep_failing_is_no_longer_expanded():
    tree = PUCTTree(TreeOptions(dead_end_failures=3))
    tree.add_root(cand("root"), 1.0)
    a = measured_child(tree, 0, "a", 1.2)
    tree.record_failure(a.id)
    tree.record_failure(a.id)
    assert tree.expandable(a)
    measured_child(tree, a.id, "ok", 1.1)  # a success resets the count
    tree.record_failure(a.id)
    tree.record_failure(a.id)
    assert tree.expandable(a)
    tree.record_failure(a.id)
    assert a.dead and not tree.expandable(a)
    for _ in range(5):
        tree.record_failure(0)
    assert tree.expandable(tree.root)  # the reference is never given up


def test_pending_failed_and_pruned_nodes_are_not_expandable():
    tree = PUCTTree()
    tree.add_root(cand("root"), 1.0)
    queued = tree.add_child(0, cand("q"))
    queued.state = "queued"
    pruned = tree.add_child(0, cand("p"))
    pruned.state = "accepted-by-forecast"
    tree.set_provisional(pruned.id, 0.3)
    pruned.pruned = True
    assert tree.select(5) == [0]


def test_the_tree_survives_json():
    tree = PUCTTree(TreeOptions(c=2.0, log_rewards=True, widening_k=3))
    tree.add_root(cand("root"), 1.0)
    measured_child(tree, 0, "a", 2.0)
    tree.record_expansion(0)
    data = json.loads(json.dumps(tree.to_dict()))
    again = PUCTTree.from_dict(data)
    assert again.to_dict() == tree.to_dict()
    assert again.scores() == tree.scores()
    assert again.is_duplicate(cand("a"))
