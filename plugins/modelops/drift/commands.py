"""``modelops drift``: compare current scored samples with a baseline (KS per feature + score)."""

from __future__ import annotations

import argparse
import json

from modelops.drift.model_samples import read_text
from modelops.errors import ContractError, ObjectStoreError
from modelops.modelspec.recommender import FEATURES_FILE as RECOMMENDER_FEATURES


def _fraction(raw: str) -> float:
    value = float(raw)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {raw} (example: 0.05)")
    return value


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {raw} (example: 1000000)")
    return value


def _run(args: argparse.Namespace) -> int:
    from modelops.drift.job import run_drift

    sections = None
    if args.sections:
        try:
            sections = json.loads(read_text(args.sections))
        except (OSError, ValueError, ObjectStoreError) as exc:
            raise ContractError(f"--sections {args.sections}: must be a readable JSON object "
                                f"(example: {{\"Feature contract\": {{\"success\": true}}}}): {exc}") from exc
        if not isinstance(sections, dict):
            raise ContractError(f"--sections {args.sections}: must hold a JSON object (title -> content)")
    result = run_drift(
        args.baseline, args.current, args.features, args.out,
        threshold=args.threshold, max_rows=args.max_rows, master=args.master, extra_sections=sections,
    )
    print(json.dumps({
        "drifted": result.drifted, "top_causes": list(result.top_causes),
        "rows": {"baseline": result.rows[0], "current": result.rows[1]}, "sampled": result.sampled,
        "json": result.json_path, "html": result.html_path,
    }))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "drift",
        help="KS drift of every feature and the score: current scored samples vs a baseline",
        description=(
            "Two-sample Kolmogorov-Smirnov per feature and for the score, computed with Spark. "
            "Writes OUT/drift.json and OUT/drift_report.html. Exit code 0 whether or not drift "
            "was found (read 'drifted' from the JSON); 2 on bad input."
        ),
    )
    parser.add_argument("--baseline", required=True, metavar="PATH",
                        help="baseline scored samples: Parquet file or dt=/hour= partitioned directory, local or "
                             "s3://bucket/prefix (read by the Spark executors)")
    parser.add_argument("--current", required=True, metavar="PATH", help="current scored samples, same forms")
    parser.add_argument("--features", required=True, metavar="FILE",
                        help=f"feature metadata YAML (the recommender's: {RECOMMENDER_FEATURES}), or a model spec "
                             "JSON (a version's model-spec.json: its features); a local file or s3://bucket/key")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (or s3://bucket/prefix)")
    parser.add_argument("--threshold", type=_fraction, default=0.05,
                        help="KS D above which a column drifts, unless its drift_threshold says otherwise")
    parser.add_argument("--max-rows", type=_positive, default=1_000_000,
                        help="per side; a larger side is reduced to a seeded uniform sample of this size")
    parser.add_argument("--sections", default=None, metavar="FILE",
                        help="JSON object of extra report sections (title -> text, mapping or list of mappings); "
                             "a local file or s3://bucket/key")
    parser.add_argument("--master", default=None,
                        help="Spark master URL (default: MODELOPS_SPARK_MASTER, local[2])")
    parser.set_defaults(func=_run)
