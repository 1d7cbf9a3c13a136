"""tools/app_venvs.py: a program's venv is used only when complete for the current pins.

The cache and requirements directories are pointed at a temp dir, so these
build nothing: a complete venv is one with an interpreter and a stamp, and the
stamp is what decides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import app_venvs

pytestmark = pytest.mark.apps


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(app_venvs, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(app_venvs, "REQUIREMENTS", tmp_path / "req")
    monkeypatch.setattr(app_venvs, "REPO", tmp_path)
    (tmp_path / "req").mkdir()
    (tmp_path / "req" / "requirements-faust.txt").write_text("faust-streaming==0.15.3\n")
    return tmp_path


def fake_venv(dirs: Path, stamp: str | None) -> Path:
    python = dirs / "cache" / "faust" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    if stamp is not None:
        (dirs / "cache" / "faust" / app_venvs.STAMP).write_text(stamp)
    return python


def test_a_missing_venv_says_how_to_build_it(dirs: Path) -> None:
    with pytest.raises(app_venvs.AppVenvError, match=r"not built .*tools/app_venvs.py build faust"):
        app_venvs.python_of("faust")


def test_a_venv_without_its_stamp_is_not_complete(dirs: Path) -> None:
    """pip was interrupted: the interpreter is there, the stamp is not."""
    fake_venv(dirs, None)
    with pytest.raises(app_venvs.AppVenvError, match="not built"):
        app_venvs.python_of("faust")


def test_a_venv_for_other_pins_is_stale(dirs: Path) -> None:
    fake_venv(dirs, app_venvs.expected_stamp("faust"))
    (dirs / "req" / "requirements-faust.txt").write_text("faust-streaming==0.15.4\n")
    with pytest.raises(app_venvs.AppVenvError, match="other pins"):
        app_venvs.python_of("faust")


def test_a_complete_venv_is_reused_by_build(dirs: Path) -> None:
    python = fake_venv(dirs, app_venvs.expected_stamp("faust"))
    assert app_venvs.python_of("faust") == python
    # build() finds it complete and runs nothing: the fake interpreter could run nothing.
    assert app_venvs.build("faust") == python
    assert app_venvs.main(["python", "faust"]) == 0


def test_an_unknown_program_is_refused(dirs: Path) -> None:
    with pytest.raises(app_venvs.AppVenvError, match="unknown program 'kstreams'"):
        app_venvs.python_of("kstreams")
    assert app_venvs.main(["build", "kstreams"]) == 1


def test_the_pins_are_exact() -> None:
    """Every line of the committed requirements pins one package with ==."""
    for name in app_venvs.APPS:
        lines = app_venvs.requirements_of(name).read_text().splitlines()
        pins = [line for line in lines if line and not line.startswith("#")]
        assert pins, name
        for pin in pins:
            assert pin.count("==") == 1 and " " not in pin, (name, pin)
