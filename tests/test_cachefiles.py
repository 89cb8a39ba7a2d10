"""The folder safety rules both on-disk caches share (einc/cachefiles.py): the kernel
cache (runtime/triton_executor/diskcache.py) and the remembered paths
(planner/pathcache.py) refuse the same folders, read no links, write through temporary
files and remove those a killed writer left."""

import os
import tempfile
import time
import warnings

import pytest

from einc import cachefiles
from einc.planner import pathcache
from einc.runtime.triton_executor import diskcache


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    diskcache.forget()
    yield tmp_path
    diskcache.forget()


def _stale(folder, name):
    """A temporary file as a writer killed two hours ago left it."""
    path = folder / name
    path.write_bytes(b"partial")
    old = time.time() - 2 * cachefiles.STALE_TMP_SECONDS
    os.utime(path, (old, old))
    return path


def test_both_caches_remove_the_temporary_files_a_killed_writer_left():
    kernels, paths = diskcache.kernel_dir(), pathcache.folder()
    stale = [_stale(kernels, ".einc_mm_x.abc123.tmp"), _stale(paths, f".{0:064x}.abc123.tmp")]
    recent = [kernels / ".einc_mm_y.def456.tmp", paths / f".{1:064x}.def456.tmp"]
    for path in recent:
        path.write_bytes(b"being written")
    diskcache.store("einc_test_stale", "VALUE = 1\n")
    pathcache.store(f"{2:064x}", "v", ((0, 1),), {})
    assert not any(p.exists() for p in stale) and all(p.exists() for p in recent)
    assert sorted(p.name for p in paths.iterdir() if not p.name.startswith(".")) == [f"{2:064x}.json"]
    assert pathcache.clear() == 2 and list(paths.iterdir()) == []      # the entry and the recent temporary file


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_both_caches_refuse_a_folder_others_can_write(fresh, monkeypatch):
    mine = fresh / "mine"
    mine.mkdir()
    os.chmod(mine, 0o777)
    monkeypatch.setenv("EINC_CACHE_DIR", str(mine))
    with pytest.warns(RuntimeWarning, match=r"refusing the kernel cache folder .*others can write it \(mode 0777\)"):
        assert diskcache.kernel_dir().parent != mine
    with pytest.warns(RuntimeWarning, match=r"not using .* for remembered contraction paths: others can write it"):
        assert pathcache.folder() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # once each
        assert pathcache.folder() is None and diskcache.kernel_dir().parent != mine
    assert os.listdir(mine) == []


def test_only_a_regular_file_within_the_limit_is_read(fresh):
    data = fresh / "data"
    data.write_bytes(b"x" * 100)
    link = fresh / "link"
    link.symlink_to(data)
    assert cachefiles.read(data) == b"x" * 100 and cachefiles.read(data, 100) == b"x" * 100
    assert cachefiles.read(data, 99) is None and cachefiles.read(link) is None and cachefiles.read(fresh) is None


def test_an_entry_just_written_is_kept_however_old():
    folder = diskcache.kernel_dir()
    for k in range(3):
        (folder / f"einc_{k}.py").write_bytes(b"#" * 10)
        os.utime(folder / f"einc_{k}.py", (1000 + k, 1000 + k))
    entries = cachefiles.scan(folder, diskcache.is_module)
    assert cachefiles.evict(folder, entries, 1, keep="einc_0.py", weigh=lambda size: 1) == ["einc_1.py", "einc_2.py"]
    assert sorted(os.listdir(folder)) == ["einc_0.py"]
