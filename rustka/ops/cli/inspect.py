"""``rustka dump PATH`` and ``rustka check DATA_DIR``: offline, read-only looks at a data dir;
``rustka check --diskless``: the same look at a diskless cluster.

Neither needs a running broker nor the reactor; both only read files (see
rustka.storage.inspect), so they are safe on a live or a damaged data dir
(docs/operations.md). The cluster check reads the catalog and the bucket a broker's
config file or the ``--diskless-*`` flags name, and changes neither
(rustka.storage.diskless.verify, docs/diskless.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from rustka.config import Config
from rustka.errors import StorageError
from rustka.ops.cli.common import CommandError
from rustka.security.acl_store import ACL_FILE, check_acl_file
from rustka.security.credentials import check_credential_file
from rustka.settings import ConfigError
from rustka.storage.inspect import Problem, Report, check_data_dir, dump_path, format_dump

__all__ = ["COMMANDS", "add_parsers", "check", "run"]

COMMANDS = ("dump", "check")
EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


def add_parsers(sub: Any) -> None:
    """Register the two subcommands on the CLI's subparsers."""
    dump = sub.add_parser(
        "dump",
        help="print every batch and record of a segment, or the entries of an index",
        description="Print a .log segment (batches, records, CRC status, producer fields, "
        "compression) or a .index/.timeindex file (entries). Reads only.",
    )
    dump.add_argument("path", metavar="PATH", help="a .log, .index or .timeindex file")
    dump.add_argument("--json", action="store_true", help="print one JSON document")
    check = sub.add_parser(
        "check",
        help="verify a data dir offline, or a diskless cluster; exit 1 if anything is wrong",
        usage="rustka check [--json] DATA_DIR\n"
        "       rustka check [--json] --diskless [-c CONFIG] [--diskless-dsn DSN] "
        "[--diskless-bucket BUCKET] [...]",
        description="Verify every segment (CRCs, contiguous offsets, records), index, "
        "time index, recovery point and the offsets log of DATA_DIR without changing a byte. "
        "Lists each problem with its file and byte position; exits 1 if there is any. "
        "With --diskless, verify instead the diskless topics of the cluster whose catalog "
        "and bucket a broker's config file (-c) or the --diskless-* flags name: every "
        "catalog row against the objects in the store, reading only (docs/diskless.md).",
    )
    check.add_argument("data_dir", metavar="DATA_DIR", nargs="?")
    check.add_argument("--json", action="store_true", help="print one JSON document")
    cluster = check.add_argument_group(
        "diskless cluster", "flags override the config file's settings of the same name"
    )
    cluster.add_argument(
        "--diskless",
        action="store_true",
        help="check the diskless cluster (implied by any --diskless-* flag)",
    )
    cluster.add_argument(
        "-c", "--config", metavar="CONFIG", help="a broker's TOML config file (etc/rustka.toml)"
    )
    for flag, meta in _CLUSTER_FLAGS:
        setting = flag.replace("-", "_")
        cluster.add_argument(f"--{flag}", metavar=meta, dest=setting, help=f"the {setting} setting")


_CLUSTER_FLAGS = (
    ("diskless-dsn", "DSN"),
    ("diskless-bucket", "BUCKET"),
    ("diskless-s3-endpoint", "URL"),
    ("diskless-s3-region", "REGION"),
    ("diskless-prefix", "PREFIX"),
)


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """A data dir or a cluster, one of them; a bad path is reported by run()."""
    if args.command != "check":
        return
    flags = [f"--{flag}" for flag, _ in _CLUSTER_FLAGS if getattr(args, flag.replace("-", "_"))]
    args.diskless = bool(args.diskless or flags)
    if args.diskless and args.data_dir is not None:
        parser.error("check: give DATA_DIR or --diskless, not both")
    if not args.diskless:
        if args.config is not None:
            parser.error("check: -c/--config names a cluster for --diskless; give --diskless")
        if args.data_dir is None:
            parser.error("check: give DATA_DIR, or --diskless to check a diskless cluster")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if args.command == "dump":
        try:
            result = dump_path(Path(args.path))
        except (OSError, ValueError) as exc:
            err.write(f"rustka: {exc}\n")
            return EXIT_USAGE
        if args.json:
            json.dump(result, out, indent=1)
            out.write("\n")
        else:
            out.write(format_dump(result) + "\n")
        return EXIT_PROBLEMS if result.get("problems") else EXIT_OK
    if args.diskless:
        return _check_cluster(args, out)
    report = check_data_dir(Path(args.data_dir), topic_config_problem)
    if Path(args.data_dir).is_dir():
        _check_security_files(Path(args.data_dir), report)
    if args.json:
        json.dump(report.as_json(), out, indent=1)
        out.write("\n")
    else:
        for problem in report.problems:
            out.write(f"problem: {problem}\n")
        for note in report.notes:
            out.write(f"note: {note}\n")
        verdict = "no problems" if not report.problems else f"{len(report.problems)} problem(s)"
        out.write(f"checked {report.files_checked} files: {verdict}\n")
    return EXIT_PROBLEMS if report.problems else EXIT_OK


def cluster_config(args: argparse.Namespace) -> Config:
    """The diskless settings to check with: the config file's, then the flags'."""
    try:
        config = Config.from_file(args.config) if args.config else Config()
        flags = {
            flag.replace("-", "_"): getattr(args, flag.replace("-", "_"))
            for flag, _ in _CLUSTER_FLAGS
            if getattr(args, flag.replace("-", "_")) is not None
        }
        config = config.updated(flags) if flags else config
    except ConfigError as e:
        raise CommandError(str(e)) from None
    if not config.diskless_configured:
        raise CommandError(
            "check --diskless: no cluster named; give --diskless-dsn and --diskless-bucket, "
            "or -c with a config file that sets diskless_dsn and diskless_bucket"
        )
    return config


def _check_cluster(args: argparse.Namespace, out: TextIO) -> int:
    """Verify the diskless cluster (rustka.storage.diskless.verify); reads only."""
    config = cluster_config(args)
    try:
        from rustka.storage.diskless.catalog import Catalog
        from rustka.storage.diskless.object_store import ObjectStore
        from rustka.storage.diskless.verify import verify_cluster
    except ImportError as e:
        raise CommandError(
            f"check --diskless needs psycopg and boto3 (pip install 'rustka[diskless]'): {e}"
        ) from None
    assert config.diskless_dsn is not None and config.diskless_bucket is not None
    try:
        catalog = Catalog(config.diskless_dsn, pool_size=1)
    except StorageError as e:
        raise CommandError(str(e)) from None
    store = ObjectStore(
        config.diskless_bucket,
        endpoint_url=config.diskless_s3_endpoint,
        region=config.diskless_s3_region,
        prefix=config.diskless_prefix,
    )
    try:
        report = verify_cluster(catalog, store)
    except StorageError as e:
        raise CommandError(f"cannot check the cluster: {e}") from None
    finally:
        catalog.close()
        store.close()
    if args.json:
        json.dump(report.as_json(), out, indent=1)
        out.write("\n")
    else:
        for problem in report.problems:
            out.write(f"problem: {problem}\n")
        for note in report.notes:
            out.write(f"note: {note}\n")
        out.write(report.summary() + "\n")
    return EXIT_PROBLEMS if report.problems else EXIT_OK


def topic_config_problem(configs: Mapping[str, str]) -> str | None:
    """Why a broker with default settings would refuse these topic configs, or None."""
    try:
        Config().log_config(configs)
    except ConfigError as e:
        return str(e)
    return None


def _check_security_files(data_dir: Path, report: Report) -> None:
    """The ACL file and the credential file in the data directory (docs/security.md):
    the broker refuses to start on a damaged one, so ``check`` says so first. A
    credentials_file set elsewhere in the configuration is not looked for."""
    for found, path in (
        (check_acl_file(data_dir / ACL_FILE), data_dir / ACL_FILE),
        (check_credential_file(data_dir / "credentials"), data_dir / "credentials"),
    ):
        problems, notes = found
        report.problems.extend(Problem(str(path), None, p.split(": ", 1)[-1]) for p in problems)
        report.notes.extend(notes)
        report.files_checked += path.exists()
