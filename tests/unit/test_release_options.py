"""Release options a registered model carries as tags (used for releases started from Staging)."""

from __future__ import annotations

from modelops.release.steps import release_options


def test_model_tags_become_typed_model_release_params() -> None:
    tags = {"modelops.release.canary_steps": "25,50,100", "modelops.release.analysis_interval_s": "30",
            "modelops.release.canary_error_ratio": "1.5", "modelops.release.require_approval": "True",
            "modelops.release.": "ignored", "owner": "team-a", "modelops.sha256": "not an option"}
    assert release_options(tags) == {"canary_steps": "25,50,100", "analysis_interval_s": 30,
                                     "canary_error_ratio": 1.5, "require_approval": True}
