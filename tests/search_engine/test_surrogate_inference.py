"""The learned surrogate's classifiers are walked all at once for small batches: the probabilities must
be scikit-learn's, bit for bit, whatever the batch."""
import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

from search_engine.surrogates import learned


def _data(seed: int, n: int = 400, width: int = 6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, width))
    X[rng.random((n, width)) < 0.1] = np.nan  # missing values take each split's learned side
    y = (np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1]) ** 2 + rng.normal(0, 0.3, n) > 0.4).astype(int)
    y += (np.nan_to_num(X[:, 2]) > 1.0)
    return X, y


@pytest.mark.parametrize("rows", [1, 16, 200])
def test_stacked_trees_give_scikit_learns_probabilities_bit_for_bit(rows):
    X, y = _data(0)
    binary = HistGradientBoostingClassifier(max_iter=30, max_leaf_nodes=15, random_state=0).fit(X, y > 0)
    multi = HistGradientBoostingClassifier(max_iter=30, max_leaf_nodes=15, random_state=0).fit(X, y)
    queries, _ = _data(1, n=rows)
    got = learned._StackedTrees([multi, binary]).predict_proba(queries)
    np.testing.assert_array_equal(got[0], multi.predict_proba(queries))
    np.testing.assert_array_equal(got[1], binary.predict_proba(queries))


def test_a_small_batch_and_a_large_one_get_the_same_forecasts():
    X, y = _data(2, n=300)
    surrogate = learned.LearnedSurrogate(seed=0, max_iter=20)
    fitted = surrogate._train_uncalibrated(np.nan_to_num(X, nan=learned._MISSING), y + 1, np.ones(len(y)))
    queries = np.nan_to_num(_data(3, n=learned._STACKED_ROWS + 40)[0], nan=learned._MISSING)
    whole = surrogate._raw_probs(fitted, queries)  # above _STACKED_ROWS: scikit-learn's calls
    pieces = np.vstack([surrogate._raw_probs(fitted, queries[i:i + 16]) for i in range(0, len(queries), 16)])
    np.testing.assert_array_equal(whole, pieces)
    assert "_stacked" in fitted.__dict__  # the small batches went through the stacked trees
