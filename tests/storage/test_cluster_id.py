from __future__ import annotations

from pathlib import Path

from rustka.storage.cluster_id import FILE_NAME, load_or_create


def test_cluster_id_is_created_once_and_stays(tmp_path: Path) -> None:
    first = load_or_create(tmp_path)
    assert len(first) == 22
    assert (tmp_path / FILE_NAME).read_text().strip() == first
    assert load_or_create(tmp_path) == first


def test_each_data_dir_gets_its_own(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert load_or_create(tmp_path / "a") != load_or_create(tmp_path / "b")


def test_a_damaged_file_is_replaced_by_a_valid_id(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("not an id\n")
    fresh = load_or_create(tmp_path)
    assert len(fresh) == 22
    assert (tmp_path / FILE_NAME).read_text().strip() == fresh
