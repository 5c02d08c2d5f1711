"""``modelops example …``: train/register the reference model, publish feature tables, write requests."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from modelops.example.train import DEFAULT_ERROR_RATE, DEFAULT_SLOWDOWN, VARIANTS
from modelops.names import cli_model_name


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``example`` with its sub-commands ``train``, ``publish-features`` and ``requests``."""
    parser = sub.add_parser("example", help="the reference recommender model and its synthetic data")
    example = parser.add_subparsers(dest="example_command", metavar="ACTION", required=True)

    train = example.add_parser("train", help="train the reference model, log it to MLflow, register it")
    train.add_argument("--seed", type=int, default=7, help="seed of the synthetic world (default 7)")
    train.add_argument(
        "--hidden",
        type=int,
        nargs="*",
        default=[32],
        metavar="UNITS",
        help="MLP hidden layer sizes (default 32); none (`--hidden`) = logistic regression",
    )
    train.add_argument("--max-iter", type=int, default=60, help="training epochs at most (default 60)")
    train.add_argument("--n-requests", type=int, default=4000, help="synthetic requests (~12 items each)")
    train.add_argument(
        "--variant", choices=VARIANTS, default="good", help="good or a faulty variant for canaries"
    )
    train.add_argument(
        "--error-rate", type=float, default=DEFAULT_ERROR_RATE, help="faulty-errors: share failing"
    )
    train.add_argument("--slowdown", type=float, default=DEFAULT_SLOWDOWN, help="slow: latency factor")
    train.add_argument("--register", metavar="NAME", default=None, type=cli_model_name,
                       help="register a model version under NAME")
    train.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: settings)")
    train.add_argument("--experiment", default="modelops-example", help="MLflow experiment name")
    train.add_argument("--owner", default="recsys-team", help="owner tag")
    train.set_defaults(func=_train)

    publish = example.add_parser(
        "publish-features", help="publish the synthetic feature tables as a snapshot"
    )
    publish.add_argument("--snapshot", required=True, help="snapshot name, e.g. 2026-11-29")
    publish.add_argument("--seed", type=int, default=7)
    publish.set_defaults(func=_publish)

    requests = example.add_parser("requests", help="write a synthetic request batch (Parquet)")
    requests.add_argument("--out", type=Path, required=True, help="output .parquet file")
    requests.add_argument("--n", type=int, default=1000, help="number of requests")
    requests.add_argument("--seed", type=int, default=7)
    requests.add_argument("--unknown-share", type=float, default=0.0, help="share of unknown user/item ids")
    requests.set_defaults(func=_requests)


def _train(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from modelops.config import settings
    from modelops.example.synthetic import WorldSpec
    from modelops.example.tracking import log_trained_model
    from modelops.example.train import TrainSpec, train

    spec = TrainSpec(
        world=replace(WorldSpec(), seed=args.seed, n_requests=args.n_requests),
        hidden=tuple(args.hidden),
        max_iter=args.max_iter,
        variant=args.variant,
        error_rate=args.error_rate,
        slowdown=args.slowdown,
    )
    model = train(spec)
    logged = log_trained_model(
        model,
        args.tracking_uri or settings().mlflow_uri,
        register_name=args.register,
        experiment=args.experiment,
        owner=args.owner,
    )
    print(json.dumps({**asdict(logged), "metrics": dict(model.metrics)}, indent=2))
    return 0


def _publish(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from modelops.example.synthetic import WorldSpec, generate_tables
    from modelops.example.tables import publish_feature_tables
    from modelops.modelspec.recommender import recommender_features
    from modelops.objectstore import ObjectStore

    features = recommender_features()
    users, items = generate_tables(features, replace(WorldSpec(), seed=args.seed))
    published = publish_feature_tables(
        ObjectStore.from_settings(), args.snapshot, users, items, features=features
    )
    print(json.dumps(asdict(published), indent=2))
    return 0


def _requests(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from modelops.example.synthetic import WorldSpec, generate_requests

    frame = generate_requests(
        replace(WorldSpec(), seed=args.seed, n_requests=args.n), unknown_share=args.unknown_share
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(args.out, index=False)
    print(f"wrote {len(frame)} requests to {args.out}")
    return 0
