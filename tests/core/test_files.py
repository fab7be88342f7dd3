"""A file written through ``files.replaced_on_success``: whole or not at all, with its mode."""

import os
import stat

import pytest

from jupyter_gpumem.core.files import replaced_on_success


def test_the_file_appears_only_when_the_block_succeeds(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with replaced_on_success(str(target)) as tmp, open(tmp, "w") as fh:
            fh.write("half")
            raise RuntimeError("stopped midway")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.json"]  # no temporary left behind
    with replaced_on_success(str(target)) as tmp, open(tmp, "w") as fh:
        fh.write("new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]


def test_a_mode_holds_from_the_first_byte(tmp_path):
    target = tmp_path / "private.json"
    with replaced_on_success(str(target), mode=0o600) as tmp:
        assert stat.S_IMODE(os.stat(tmp).st_mode) == 0o600
        with open(tmp, "w") as fh:
            fh.write("{}")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
