"""The gateway's dict-indexed feature lookup gives exactly the shared FeatureLookup's matrix."""

from __future__ import annotations

import numpy as np

from modelops.example.tables import FeatureLookup
from modelops.gateway.onlinefeatures import LoadedSnapshot
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
