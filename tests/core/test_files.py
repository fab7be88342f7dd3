"""Files written and read at paths a co-tenant may share (``jupyter_gpumem.core.files``): whole or
not at all, with their mode, and never through a planted link, FIFO or device."""

import os
import stat
import threading

import pytest

from jupyter_gpumem.core import files
from jupyter_gpumem.core.files import (
    UnsafePathError,
    open_for_appending_lines,
    open_regular_for_reading,
    replaced_on_success,
)


def test_the_file_appears_only_when_the_block_succeeds(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with replaced_on_success(str(target), encoding="utf-8") as fh:
            fh.write("half")
            raise RuntimeError("stopped midway")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.json"]  # no temporary left behind
    with replaced_on_success(str(target), encoding="utf-8") as fh:
        fh.write("new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]


def test_a_mode_holds_from_the_first_byte(tmp_path):
    target = tmp_path / "private.json"
    with replaced_on_success(str(target), mode=0o600) as fh:
        (temporary,) = [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
        assert stat.S_IMODE(os.stat(temporary).st_mode) == 0o600
        fh.write(b"{}")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


def test_two_writes_of_one_file_use_temporary_names_no_one_can_predict(tmp_path):
    target = tmp_path / "out.csv"
    names = []
    for _ in range(2):
        with replaced_on_success(str(target)) as fh:
            names += [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]
            fh.write(b"x")
    assert len(names) == 2 and names[0] != names[1]
    # no part of the name is the pid or the thread (the old ``.{name}.{pid}.{thread}.part``)
    assert not {str(os.getpid()), str(threading.get_ident())} & set(names[0].split("."))


def test_links_planted_at_every_name_the_old_scheme_used_receive_nothing(tmp_path):
    """The co-tenant's attack: links at the temporary names a write would pick (the old
    ``.{name}.{pid}.{thread}.part``) pointing at a private file; the export must not touch it."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "keys"
    secret.write_text("secret")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.symlink(secret, shared / f".out.csv.{os.getpid()}.{threading.get_ident()}.part")
    with replaced_on_success(str(shared / "out.csv"), encoding="utf-8") as fh:
        fh.write("a,b\n")
    assert secret.read_text() == "secret"
    assert (shared / "out.csv").read_text() == "a,b\n" and not (shared / "out.csv").is_symlink()


def test_a_temporary_name_already_taken_is_never_opened(tmp_path, monkeypatch):
    """Even a link at the very name drawn is not followed: O_EXCL fails, another name is drawn."""
    secret = tmp_path / "secret"
    secret.write_text("secret")
    drawn = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(drawn))
    os.symlink(secret, tmp_path / ".out.aaaa.part")
    with replaced_on_success(str(tmp_path / "out"), encoding="utf-8") as fh:
        fh.write("mine")
    assert secret.read_text() == "secret" and (tmp_path / "out").read_text() == "mine"


@pytest.mark.parametrize("plant", ["link", "fifo", "folder"])
def test_a_link_fifo_or_folder_at_the_target_is_refused_and_left_as_it_is(tmp_path, plant):
    secret = tmp_path / "secret"
    secret.write_text("secret")
    target = tmp_path / "out.csv"
    if plant == "link":
        os.symlink(secret, target)
    elif plant == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UnsafePathError, match="refusing to replace it") as info:
        with replaced_on_success(str(target)) as fh:
            fh.write(b"x")
    assert {"link": "a symbolic link", "fifo": "a FIFO", "folder": "a folder"}[plant] in str(info.value)
    assert sorted(os.listdir(tmp_path)) == before and secret.read_text() == "secret"


def test_a_line_file_cannot_be_opened_through_a_planted_link(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("secret")
    os.symlink(secret, tmp_path / "trace.jsonl")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_for_appending_lines(tmp_path / "trace.jsonl")
    assert secret.read_text() == "secret"


def test_a_line_file_at_a_fifo_is_refused_at_once_without_a_reader(tmp_path):
    os.mkfifo(tmp_path / "trace.jsonl")
    with pytest.raises(UnsafePathError, match="FIFO"):
        open_for_appending_lines(tmp_path / "trace.jsonl")


def test_a_device_is_refused_without_being_opened():
    with pytest.raises(UnsafePathError, match="a device"):
        open_for_appending_lines("/dev/null")
    with pytest.raises(UnsafePathError, match="a device"):
        open_regular_for_reading("/dev/zero", follow_links=True)


def test_a_line_file_that_exists_is_emptied_and_rewritten(tmp_path):
    target = tmp_path / "trace.jsonl"
    target.write_text("old old old\n")
    with open_for_appending_lines(target) as fh:
        fh.write("new\n")
    assert target.read_text() == "new\n"


def test_reading_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "trace.jsonl")
    with pytest.raises(UnsafePathError, match="FIFO"):
        open_regular_for_reading(tmp_path / "trace.jsonl", follow_links=True)


def test_reading_over_the_cap_is_refused_by_size_before_reading(tmp_path):
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as fh:
        fh.truncate(20 * 2**30)  # sparse: 20 GiB long, no blocks on disk
    with pytest.raises(UnsafePathError, match=r"21,474,836,480 bytes, over the limit of 1,000 bytes"):
        open_regular_for_reading(big, max_bytes=1000)
