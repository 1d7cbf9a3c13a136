"""rustka dump and rustka check on the files transactions leave: control batches and the
transaction coordinator's log."""

from __future__ import annotations

from pathlib import Path

from rustka.storage.inspect import check_data_dir, dump_path, format_dump
from rustka.storage.log_files import log_name


def test_dump_names_each_marker_and_check_reads_the_transaction_log(tmp_path: Path) -> None:
    """A control batch dumps with its marker (COMMIT or ABORT); the coordinator's
    ``__transactions`` log is checked as a log, not mistaken for a topic."""
    from rustka.storage.partition_log import PartitionLog
    from rustka.storage.txn_log import TransactionLog, TxnMetadata, TxnState
    from tests.storage.test_transactions import config as txn_config
    from tests.storage.test_transactions import txn_batch

    data_dir = tmp_path / "data"
    log = PartitionLog.open(data_dir / "orders" / "0", txn_config())
    log.append(txn_batch(7, 0))
    log.append_marker(7, 0, commit=False)
    log.append(txn_batch(7, 2))
    log.append_marker(7, 0, commit=True)
    log.close()
    store = TransactionLog.open(data_dir, txn_config())
    store.write(TxnMetadata("app", 7, 0, 60_000, TxnState.COMPLETE_COMMIT, 1))
    store.close()
    dump = dump_path(data_dir / "orders" / "0" / log_name(0))
    assert [(b["control"], b.get("marker")) for b in dump["batches"]] == [
        (False, None),
        (True, "ABORT"),
        (False, None),
        (True, "COMMIT"),
    ]
    assert " control ABORT" in format_dump(dump)
    report = check_data_dir(data_dir)
    assert not any("__transactions" in str(p) for p in report.problems), report.problems
