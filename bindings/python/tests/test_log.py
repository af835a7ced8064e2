"""The log callback, and its destroy hook releasing the Python function."""

import gc
import weakref

import pytest

import llmrt
from llmrt import callbacks
from conftest import KJV


def test_log_lines_reach_the_callback_and_replacing_releases_it(tmp_path):
    # The library logs the note below once per config path: give each load a path of its own.
    first, second = tmp_path / "first", tmp_path / "second"
    first.symlink_to(KJV, target_is_directory=True)
    second.symlink_to(KJV, target_is_directory=True)
    lines = []

    def sink(level, message):
        lines.append((level, message))

    ref = weakref.ref(sink)
    llmrt.set_log_callback(sink, "warning")
    try:
        del sink
        gc.collect()
        assert ref() is not None  # the library holds it
        llmrt.Runtime(first).close()  # its config.json lacks scoring_func: a warning at load
        assert any(level == 2 and "scoring_func" in msg and str(first) in msg for level, msg in lines), lines
        n = len(lines)
        llmrt.set_log_callback(lambda level, msg: lines.append(("second", msg)), "error")
        assert ref() is None  # the first one's destroy hook ran when it was replaced
        llmrt.Runtime(second).close()
        assert len(lines) == n  # below the new level
    finally:
        llmrt.set_log_callback(None)
    assert not any(callable(v) for v in callbacks._registry.values())


def test_bad_log_level():
    with pytest.raises(llmrt.InvalidArgumentError):
        llmrt.set_log_callback(lambda *a: None, 17)
    with pytest.raises(llmrt.InvalidArgumentError):
        llmrt.set_log_callback(lambda *a: None, "loud")
    assert not any(callable(v) for v in callbacks._registry.values())
