"""``rustka dump PATH`` and ``rustka check DATA_DIR``: offline, read-only looks at a data dir.

Neither needs a running broker nor the reactor; both only read files (see
rustka.storage.inspect), so they are safe on a live or a damaged data dir
(docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from rustka.config import Config
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
        help="verify a data dir offline; exit 1 if anything is wrong",
        description="Verify every segment (CRCs, contiguous offsets, records), index, "
        "time index, recovery point and the offsets log of DATA_DIR without changing a byte. "
        "Lists each problem with its file and byte position; exits 1 if there is any.",
    )
    check.add_argument("data_dir", metavar="DATA_DIR", nargs="?")
    check.add_argument(
        "--cluster",
        metavar="CONFIG",
        help="instead, verify the diskless catalog and bucket a broker's config file names: "
        "every row against its object (read only)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON document")


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """A data dir or a cluster to check (a bad path is reported by run())."""
    if args.command == "check" and (args.data_dir is None) == (args.cluster is None):
        parser.error("check: give DATA_DIR or --cluster CONFIG")


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
    if args.cluster is not None:
        return _check_cluster(args, out, err)
    report = check_data_dir(Path(args.data_dir), topic_config_problem)
    if Path(args.data_dir).is_dir():
        _check_security_files(Path(args.data_dir), report)
    return _report(args, out, report, f"{report.files_checked} files")


def _check_cluster(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`rustka check --cluster CONFIG`: the catalog's rows against the bucket's objects
    (`rustka.storage.diskless.verify`), with the config file's diskless settings."""
    try:
        config = Config.from_file(args.cluster)
    except (OSError, ConfigError) as e:
        err.write(f"rustka: {e}\n")
        return EXIT_USAGE
    if not config.diskless_configured:
        err.write(f"rustka: {args.cluster} names no diskless catalog and bucket\n")
        return EXIT_USAGE
    from rustka.errors import StorageError
    from rustka.storage.diskless.catalog import Catalog
    from rustka.storage.diskless.object_store import ObjectStore
    from rustka.storage.diskless.verify import verify_cluster

    assert config.diskless_dsn is not None and config.diskless_bucket is not None
    try:
        catalog = Catalog(config.diskless_dsn)
        try:
            store = ObjectStore(
                config.diskless_bucket,
                endpoint_url=config.diskless_s3_endpoint,
                region=config.diskless_s3_region,
                prefix=config.diskless_prefix,
            )
            try:
                report = verify_cluster(catalog, store)
            finally:
                store.close()
        finally:
            catalog.close()
    except StorageError as e:
        err.write(f"rustka: {e}\n")
        return EXIT_USAGE
    what = f"{report.partitions} partitions, {report.rows} rows, {report.objects} objects"
    return _report(args, out, report, what)


def _report(args: argparse.Namespace, out: TextIO, report: Any, checked: str) -> int:
    """A check's answer, as JSON or as lines (problems, notes, a verdict); its exit code."""
    if args.json:
        json.dump(report.as_json(), out, indent=1)
        out.write("\n")
    else:
        for problem in report.problems:
            out.write(f"problem: {problem}\n")
        for note in report.notes:
            out.write(f"note: {note}\n")
        verdict = "no problems" if not report.problems else f"{len(report.problems)} problem(s)"
        out.write(f"checked {checked}: {verdict}\n")
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
