"""The test session's download of the round-6 wheels (tests/support/pinned_wheels.py): which pins a
folder lacks, read from a pins file in .ci/round6-wheels.txt's format."""

from __future__ import annotations

from pathlib import Path

from tests.support import pinned_wheels


def test_the_pins_file_names_wheels_as_their_files_spell_them_and_a_folder_lacks_the_ones_absent(tmp_path: Path) -> None:
    # R: D2 -- a newcomer's run downloads only what is missing
    pins = tmp_path / "pins.txt"
    pins.write_text("# comment\nfas-judgement==3.1.1 --hash=sha256:00\nAegisRT==0.1.0 --hash=sha256:11\n\n")
    assert pinned_wheels.pinned(pins) == ["fas_judgement-3.1.1", "aegisrt-0.1.0"]
    folder = tmp_path / "wheels"
    assert pinned_wheels.missing(folder, pins) == ["fas_judgement-3.1.1", "aegisrt-0.1.0"]  # no folder yet
    folder.mkdir()
    (folder / "fas_judgement-3.1.1-py3-none-any.whl").write_bytes(b"")
    (folder / "aegisrt-0.1.0.tar.gz").write_bytes(b"")  # not a wheel
    assert pinned_wheels.missing(folder, pins) == ["aegisrt-0.1.0"]


def test_the_repositorys_pins_are_all_found_once_downloaded(tmp_path: Path) -> None:
    # R: D2
    stems = pinned_wheels.pinned()
    assert len(stems) == 8
    for stem in stems:
        (tmp_path / f"{stem}-py3-none-any.whl").write_bytes(b"")
    assert pinned_wheels.missing(tmp_path) == []
