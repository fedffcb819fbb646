"""The host's reads and writes under an item's root never follow what a jail left there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_llmtool.sandbox import SandboxError
from pytest_llmtool.sandbox.hostio import confined, write_text


def test_confined_refuses_a_link_or_special_file_anywhere_below_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f").write_text("x")
    assert confined(root, root / "a" / "f")
    assert confined(root, root / "a" / "missing" / "deeper")
    (root / "up").symlink_to(tmp_path)
    assert not confined(root, root / "up")
    assert not confined(root, root / "up" / "anything")
    os.mkfifo(root / "fifo")
    assert not confined(root, root / "fifo")
    # The root itself may be reached through links: only what lies below it is checked.
    (tmp_path / "alias").symlink_to(root)
    assert confined(tmp_path / "alias", tmp_path / "alias" / "a" / "f")


def test_write_text_replaces_a_link_or_fifo_and_writes_its_own_file(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside.txt"
    root.mkdir()
    outside.write_text("precious")
    (root / "t.txt").symlink_to(outside)
    os.mkfifo(root / "e.jsonl")
    write_text(root, root / "t.txt", "mine")
    write_text(root, root / "e.jsonl", "events")
    assert outside.read_text() == "precious"
    assert not (root / "t.txt").is_symlink() and (root / "t.txt").read_text() == "mine"
    assert (root / "e.jsonl").read_text() == "events"


def test_write_text_refuses_to_write_through_a_linked_directory(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "artifacts").symlink_to(elsewhere)
    with pytest.raises(SandboxError, match="symbolic link or special file"):
        write_text(root, root / "artifacts" / "t.txt", "mine")
    assert list(elsewhere.iterdir()) == []
