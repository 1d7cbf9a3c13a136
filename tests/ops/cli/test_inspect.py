"""``rustka check`` and ``rustka dump`` run for real on damaged copies of a real data dir."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_twisted

from rustka.config import Config
from rustka.ops.cli import main
from rustka.record.batch import Record, compress_batch, encode_batch, parse_header
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import TOPIC_CONFIG_FILE, encode_topic_config
from rustka.storage.log_manager import LogManager
from rustka.storage.offsets import OffsetsStore
from tests.conftest import RunningBroker

RUSTKA = Path(sys.executable).with_name("rustka")
TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cleanly closed data dir: one topic with several segments and indexes, commits, and a
    topic with configs of its own."""
    data_dir = tmp_path_factory.mktemp("pristine")
    config = LogConfig(
        segment_bytes=64 * 1024, segment_ms=None, index_interval_bytes=512, flush="never"
    )
    logs = LogManager.open(data_dir, config, resolve=Config().log_config)
    logs.create_topic("tuned", 1, {"cleanup.policy": "compact", "retention.ms": "-1"})
    plog = logs.get_or_create("orders", 1).partition(0)
    for i in range(300):
        batch = encode_batch(
            [Record(b"k%d" % i, b"value-%d" % i * 20, timestamp=TS + i)], timestamp=TS + i
        )
        plog.append(compress_batch(batch, "gzip") if i % 7 == 0 else batch)
    offsets = OffsetsStore.open(data_dir, config)
    for i in range(5):
        offsets.commit("g", "orders", 0, i * 10)
    offsets.close()
    logs.close()
    return data_dir


def digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(argv)
    return status, capsys.readouterr().out


def segment(data_dir: Path, n: int = 0, suffix: str = ".log") -> Path:
    return sorted((data_dir / "orders" / "0").glob(f"*{suffix}"))[n]


def first_batch_size(path: Path) -> int:
    return parse_header(path.read_bytes()).size


def flip_segment_byte(d: Path) -> tuple[Path, str]:
    log = segment(d, 1)
    data = bytearray(log.read_bytes())
    pos = first_batch_size(log)
    data[pos + 70] ^= 0x40
    log.write_bytes(bytes(data))
    return log, f"{log} at byte {pos}: CRC-32C mismatch"


def truncate_segment(d: Path) -> tuple[Path, str]:
    log = segment(d, 0)
    data = log.read_bytes()
    log.write_bytes(data[:-5])
    return log, "is cut off"


def index_out_of_order(d: Path) -> tuple[Path, str]:
    index = segment(d, 0, ".index")
    data = index.read_bytes()
    assert len(data) >= 16
    index.write_bytes(data[8:16] + data[0:8] + data[16:])
    return index, "is out of order"


def index_mid_batch(d: Path) -> tuple[Path, str]:
    index = segment(d, 0, ".index")
    data = bytearray(index.read_bytes())
    (rel, pos) = struct.unpack_from(">II", data, 0)
    struct.pack_into(">II", data, 0, rel, pos + 3)
    index.write_bytes(bytes(data))
    return index, f"points at position {pos + 3}, which is not a batch start"


def bad_recovery_point(d: Path) -> tuple[Path, str]:
    path = d / "orders" / "0" / "recovery-point"
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))
    return path, "checksum mismatch"


def corrupt_offsets(d: Path) -> tuple[Path, str]:
    [log] = sorted((d / "__offsets").glob("*.log"))
    data = bytearray(log.read_bytes())
    second = parse_header(data).size
    data[second + 65] ^= 0x10
    log.write_bytes(bytes(data))
    return log, f"{log} at byte {second}: CRC-32C mismatch"


def damaged_topic_config(d: Path) -> tuple[Path, str]:
    path = d / "tuned" / TOPIC_CONFIG_FILE
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01
    path.write_bytes(bytes(data))
    return path, "damaged: checksum mismatch"


def invalid_topic_config(d: Path) -> tuple[Path, str]:
    path = d / "tuned" / TOPIC_CONFIG_FILE
    path.write_bytes(encode_topic_config({"retention.ms": "soon", "segment.bytes": "1000"}))
    return path, "Invalid value soon for configuration retention.ms"


def offsets_out_of_chain(d: Path) -> tuple[Path, str]:
    log = segment(d, 1)
    data = bytearray(log.read_bytes())
    struct.pack_into(">q", data, 0, 99_999)
    log.write_bytes(bytes(data))
    return log, "base offset 99999, expected"


DAMAGE: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "segment byte flip": flip_segment_byte,
    "truncated segment": truncate_segment,
    "index entry out of order": index_out_of_order,
    "index pointing mid-batch": index_mid_batch,
    "bad recovery-point file": bad_recovery_point,
    "corrupt offsets batch": corrupt_offsets,
    "broken offset chain": offsets_out_of_chain,
    "damaged topic-config file": damaged_topic_config,
    "invalid topic config": invalid_topic_config,
}


def test_clean_data_dir_checks_ok(pristine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An undamaged data dir: exit 0, every file counted, no problems."""
    status, out = run(["check", str(pristine)], capsys)
    assert status == 0, out
    assert "no problems" in out
    status, out = run(["check", "--json", str(pristine)], capsys)
    report = json.loads(out)
    assert status == 0 and report["ok"] is True and report["problems"] == []
    assert report["files_checked"] >= 5


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_check_names_each_kind_of_damage_and_changes_nothing(
    kind: str, pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each damaged file is named with the problem; exit 1; not one byte changes."""
    data_dir = tmp_path / "data"
    shutil.copytree(pristine, data_dir)
    damaged, message = DAMAGE[kind](data_dir)
    before = digest(data_dir)
    status, out = run(["check", str(data_dir)], capsys)
    assert status == 1, out
    lines = [line for line in out.splitlines() if line.startswith("problem:")]
    assert any(str(damaged) in line and message in line for line in lines), out
    assert digest(data_dir) == before
    status, out = run(["check", "--json", str(data_dir)], capsys)
    assert status == 1
    problems = json.loads(out)["problems"]
    assert any(p["file"] == str(damaged) for p in problems)
    assert digest(data_dir) == before


def test_check_as_a_real_process(pristine: Path, tmp_path: Path) -> None:
    """The installed console script exits 1 on damage and 0 once it is repaired."""
    data_dir = tmp_path / "data"
    shutil.copytree(pristine, data_dir)
    ok = subprocess.run([RUSTKA, "check", str(data_dir)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    _damaged, message = flip_segment_byte(data_dir)
    bad = subprocess.run([RUSTKA, "check", str(data_dir)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert message in bad.stdout


def test_dump_segment_text_and_json(pristine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dump shows every batch with CRC status, codec and producer fields, and every record."""
    log = segment(pristine, 0)
    status, out = run(["dump", str(log)], capsys)
    assert status == 0
    assert "batch position 0 offsets 0..0" in out and "crc" in out and " ok " in out
    assert "compression gzip" in out and "compression none" in out
    assert "producer_id -1 producer_epoch -1 base_sequence -1" in out
    assert f"offset 1 timestamp {TS + 1} key_size 2 value_size 140" in out
    status, out = run(["dump", "--json", str(log)], capsys)
    doc = json.loads(out)
    assert doc["kind"] == "segment" and doc["problems"] == []
    first = doc["batches"][0]
    assert first["crc_ok"] is True and first["compression"] == "gzip"
    assert first["records"][0] == {
        "offset": 0,
        "timestamp": TS,
        "key_size": 2,
        "value_size": 140,
        "headers": [],
    }
    offsets = [r["offset"] for b in doc["batches"] for r in b["records"]]
    assert offsets == list(range(len(offsets)))


def test_dump_reports_a_bad_crc(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(pristine, data_dir)
    log, _ = flip_segment_byte(data_dir)
    status, out = run(["dump", "--json", str(log)], capsys)
    assert status == 1
    assert json.loads(out)["batches"][1]["crc_ok"] is False


def test_dump_index_and_time_index(pristine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Index entries come out as absolute offset and position, time index entries too."""
    index = segment(pristine, 1, ".index")
    base = int(index.name.split(".")[0])
    raw = index.read_bytes()
    rel, pos = struct.unpack_from(">II", raw, 0)
    status, out = run(["dump", "--json", str(index)], capsys)
    doc = json.loads(out)
    assert status == 0 and doc["kind"] == "index"
    assert doc["entries"][0] == {"relative_offset": rel, "offset": base + rel, "position": pos}
    assert len(doc["entries"]) == len(raw) // 8
    status, out = run(["dump", str(index)], capsys)
    assert f"offset {base + rel} (relative {rel}) position {pos}" in out
    time_index = index.with_suffix(".timeindex")
    if time_index.exists() and time_index.stat().st_size:
        status, out = run(["dump", "--json", str(time_index)], capsys)
        entries = json.loads(out)["entries"]
        ts, trel = struct.unpack_from(">qI", time_index.read_bytes(), 0)
        assert entries[0] == {"timestamp": ts, "relative_offset": trel, "offset": base + trel}


def test_dump_refuses_other_files(pristine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["dump", str(pristine / "orders" / "0" / "recovery-point")])
    assert status == 2
    assert "not a .log, .index or .timeindex" in capsys.readouterr().err


def test_check_reads_the_acl_and_credential_files(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whole ACL and credential files are notes; a damaged ACL file or a credential file
    others may read is a problem naming the file (the broker would refuse to start)."""
    from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
    from rustka.security.acl_store import save_acls
    from rustka.security.credentials import CredentialStore
    from rustka.security.scram import SCRAM_SHA_256, derive_credential

    data_dir = tmp_path / "data"
    shutil.copytree(pristine, data_dir)
    acl = AclBinding(
        ResourceType.TOPIC,
        "orders",
        PatternType.LITERAL,
        "User:a",
        "*",
        Operation.READ,
        Permission.ALLOW,
    )
    save_acls(data_dir / "acls", [acl])
    CredentialStore(data_dir / "credentials").upsert(
        "a", "SCRAM-SHA-256", derive_credential(SCRAM_SHA_256, "pw")
    )
    status, out = run(["check", str(data_dir)], capsys)
    assert status == 0, out
    assert f"note: {data_dir / 'acls'}: 1 ACLs" in out
    assert f"note: {data_dir / 'credentials'}: 1 users, 1 credentials" in out
    (data_dir / "acls").write_bytes((data_dir / "acls").read_bytes().replace(b"orders", b"0rders"))
    (data_dir / "credentials").chmod(0o644)
    status, out = run(["check", "--json", str(data_dir)], capsys)
    report = json.loads(out)
    assert status == 1
    files = {p["file"]: p["message"] for p in report["problems"]}
    assert "checksum" in files[str(data_dir / "acls")]
    assert "0600" in files[str(data_dir / "credentials")]


@pytest_twisted.ensureDeferred
async def test_dump_shows_the_markers_a_real_transactional_producer_left(
    broker: RunningBroker,
) -> None:
    """confluent-kafka commits, aborts and commits again: `rustka dump` (a real process)
    shows each transaction's lz4 data batches as transactional and its end as a control
    batch naming its marker, COMMIT, ABORT, COMMIT, at the offsets the log gave them."""
    from twisted.internet import threads

    from tests.conftest import within
    from tests.kafka.test_transactions_clients import commit_and_abort

    await within(broker.broker.create_topic("txn", 1))
    await within(threads.deferToThread(commit_and_abort, broker.address), 90)
    await within(broker.broker.transactions.settled("t-commit"))
    [log] = sorted((Path(broker.config.data_dir) / "txn").glob("*/*.log"))
    done = await threads.deferToThread(
        subprocess.run, [str(RUSTKA), "dump", "--json", str(log)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    batches = json.loads(done.stdout)["batches"]
    controls = [(b["base_offset"], b["marker"]) for b in batches if b["control"]]
    assert controls == [(3, "COMMIT"), (6, "ABORT"), (8, "COMMIT")]
    data = [b for b in batches if not b["control"]]
    assert data and all(b["transactional"] and b["compression"] == "lz4" for b in data)
    assert len({b["producer_id"] for b in batches}) == 1
    text = await threads.deferToThread(
        subprocess.run, [str(RUSTKA), "dump", str(log)], capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0, text.stderr
    marked = [line for line in text.stdout.splitlines() if " control " in line]
    assert [line.split()[4] for line in marked] == ["3..3", "6..6", "8..8"]
    assert [line.rsplit(" ", 1)[1] for line in marked] == ["COMMIT", "ABORT", "COMMIT"]
    assert all(" transactional control " in line for line in marked)
