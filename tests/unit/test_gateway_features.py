"""The gateway's dict-indexed feature lookup gives exactly the shared FeatureLookup's matrix."""

from __future__ import annotations

import numpy as np

from modelops.example.tables import FeatureLookup
from modelops.gateway.lookup.onlinefeatures import LoadedSnapshot
from modelops.gateway.testing import feature_tables


def test_fast_lookup_equals_the_shared_lookup_including_unknown_ids() -> None:
    users, items = feature_tables(n_users=20, n_items=30)
    lookup = FeatureLookup.from_frames(users, items)
    snapshot = LoadedSnapshot.prepare("s1", lookup, 0.0, 0.0)
    for user in ("u_0003", "u_0019", "nobody"):
        item_ids = ["i_0001", "i_0029", "unknown", "i_0001", "i_0007"]
        expected = lookup.matrix([user] * len(item_ids), item_ids)
        got = snapshot.matrix(user, item_ids)
        assert got.dtype == np.float32 and got.shape == (5, 128)
        np.testing.assert_array_equal(got, expected)  # NaN in the same places too
    assert np.isnan(snapshot.matrix("nobody", ["unknown"])).all()


def test_interleaved_feature_positions_are_scattered_and_consecutive_ones_copied_as_a_block() -> None:
    users, items = feature_tables(n_users=20, n_items=30)
    names = list(FeatureLookup.from_frames(users, items).names)
    interleaved = [name for pair in zip(names[:64], names[64:], strict=True) for name in pair]  # user, item, ...
    for order, block in ((names, True), (interleaved, False)):
        lookup = FeatureLookup.from_frames(users, items, order)
        snapshot = LoadedSnapshot.prepare("s1", lookup, 0.0, 0.0)
        assert isinstance(snapshot.user_columns, slice) is block
        assert isinstance(snapshot.item_columns, slice) is block
        for user in ("u_0003", "nobody"):
            item_ids = ["i_0001", "unknown", "i_0029"]
            np.testing.assert_array_equal(snapshot.matrix(user, item_ids),
                                          lookup.matrix([user] * len(item_ids), item_ids))
