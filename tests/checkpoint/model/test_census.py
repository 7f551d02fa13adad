"""`ckpt inspect` counts a checkpoint a page of its listing at a time (`load_census`): its document
is the one a model of every file gave, on every corpus checkpoint, and it refuses what that load
refused, with the same error."""

from __future__ import annotations

import os
import shutil

import pytest

from checkpoint.analysis import inspect_summary
from checkpoint.errors import CheckpointError
from checkpoint.model import load_census, load_checkpoint
from testbed.copying import copy_checkpoint


def test_the_census_says_what_a_model_of_every_file_said(corpus, defaults) -> None:
    checkpoints = {**corpus, **defaults}
    for name, path in checkpoints.items():
        assert inspect_summary(*load_census(str(path))) == inspect_summary(load_checkpoint(str(path))), name


@pytest.mark.parametrize("name", ["snapshots", "format_v1", "join"])
def test_without_operator_metadata_its_operators_come_from_the_state_files_as_before(
    corpus, tmp_path, name
) -> None:
    """The operators then come from the state files' names (partitions, stores): the census keeps
    one file per store and kind, which says as much. A join's four stores without metadata are
    refused by both, with one message."""
    copy = tmp_path / name
    copy_checkpoint(corpus[name], copy)
    for meta in copy.glob("state/*/_metadata"):
        shutil.rmtree(meta)
    if name == "join":
        for load in (load_checkpoint, load_census):
            with pytest.raises(CheckpointError, match="but no operator metadata: their commit-log order"):
                load(str(copy))
        return
    census = inspect_summary(*load_census(str(copy)))
    assert census == inspect_summary(load_checkpoint(str(copy)))
    assert census["operators"][0]["partitions"] == 4 and census["operators"][0]["stores"] == ["default"]


@pytest.mark.parametrize("damage", ["fifo", "link out"])
def test_a_file_no_read_may_open_refuses_it_as_before(corpus, tmp_path, damage) -> None:
    copy = tmp_path / "c"
    copy_checkpoint(corpus["snapshots"], copy)
    target = copy / "state" / "0" / "0" / "zz-odd"
    if damage == "fifo":
        os.mkfifo(target)
    else:
        (tmp_path / "outside").write_text("x")
        os.symlink(tmp_path / "outside", target)
    with pytest.raises(CheckpointError) as before:
        load_checkpoint(str(copy))
    with pytest.raises(type(before.value)) as now:
        load_census(str(copy))
    assert str(now.value) == str(before.value)
