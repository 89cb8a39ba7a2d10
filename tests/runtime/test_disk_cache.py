"""The kernel cache folder: only einc's own source runs, the folder is private and
bounded, and every setting fails with a message that names it."""

import importlib.util
import inspect
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import warnings
from importlib._bootstrap_external import _code_to_hash_pyc, _code_to_timestamp_pyc
from pathlib import Path

import pytest

import einc
from einc import cachefiles, config
from einc.errors import ConfigError, EincError
from einc.runtime.triton_executor import diskcache, loader
from einc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------- helpers

@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A cache folder of its own, warnings not yet given, fallbacks under tmp_path/tmp."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EINC_CACHE_MAX_MB", raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    einc.cache_clear()      # as in a new process: nothing loaded, no warning given, no fallback chosen
    yield tmp_path
    einc.cache_clear()


@pytest.fixture
def triton_backend(fresh, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("EINC_BACKEND", "triton")
    einc.cache_clear()
    yield fresh
    einc.cache_clear()


def matmul():
    import torch
    a, b = torch.randn(5, 6), torch.randn(6, 7)
    out = einc.einsum("ij,jk->ik", a, b)
    torch.testing.assert_close(out, a @ b)
    return out


def only_backend():
    """What ran the matmul of :func:`matmul` (the entry einc built for it)."""
    import torch
    (backend,) = einc.explain("ij,jk->ik", torch.empty(5, 6), torch.empty(6, 7)).backends
    return backend.split()[0]


def the_module(folder: Path) -> Path:
    (path,) = (folder / "cache" / "kernels").glob("einc_mm_*.py")
    return path


def as_if_new_process(name: str) -> None:
    """Forget the loaded module and the plans, as a later process starts without them."""
    sys.modules.pop(f"einc_kernels.{name}", None)
    einc.cache_clear()


def payload(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()\n"


def source_of(name: str, size: int = 1000) -> str:
    """A module of exactly ``size`` bytes that defines VALUE = name."""
    head = f"VALUE = {name!r}\n"
    return head + "#" * (size - len(head) - 1) + "\n"


def foreign(path: Path, monkeypatch) -> None:
    """Make ``path`` belong to someone else: chown where we may, else as einc sees it."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        ino = os.stat(path).st_ino
        real = cachefiles.is_yours
        monkeypatch.setattr(cachefiles, "is_yours", lambda st: st.st_ino != ino and real(st))


def runs_einc_s_source(path: Path, data: bytes, marker: Path | None = None) -> None:
    """The next call runs the kernel from einc's own source, with no fallback warning: the
    module is ``data`` again, and the planted code, if any, never ran (``marker`` is absent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matmul()
    assert only_backend() == "triton" and (marker is None or not marker.exists())
    assert path.read_bytes() == data


def someone_elses_shared_folder(fresh: Path, monkeypatch) -> Path:
    """EINC_CACHE_DIR set to a new folder that everyone may write and someone else owns."""
    shared = fresh / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    foreign(shared, monkeypatch)
    monkeypatch.setenv("EINC_CACHE_DIR", str(shared))
    return shared


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ----------------------------------------------------------------------- only einc's source runs

@pytest.mark.parametrize("kind", ["timestamp", "unchecked-hash"])
def test_a_planted_pyc_never_runs(triton_backend, kind):
    matmul()
    path = the_module(triton_backend)
    data = path.read_bytes()
    marker = triton_backend / "pwned"
    code = compile(payload(marker) + data.decode(), str(path), "exec")
    if kind == "timestamp":         # a header that matches the intact .py (mtime and size)
        st = os.stat(path)
        pyc = _code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size)
    else:                           # never checked against the source by importlib
        pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
    cached = Path(importlib.util.cache_from_source(str(path)))
    cached.parent.mkdir(exist_ok=True)
    cached.write_bytes(pyc)

    # control: an ordinary import of the module by path does run the planted bytecode
    spec = importlib.util.spec_from_file_location("planted_check", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert marker.exists()
    marker.unlink()

    as_if_new_process(path.stem)
    runs_einc_s_source(path, data, marker)


def test_a_planted_py_is_rewritten_not_run(triton_backend):
    matmul()
    path = the_module(triton_backend)
    data = path.read_bytes()
    marker = triton_backend / "pwned"
    as_if_new_process(path.stem)
    path.write_text(payload(marker) + data.decode())
    runs_einc_s_source(path, data, marker)


def test_a_module_of_invalid_utf8_is_rewritten_and_the_kernel_runs(triton_backend):
    """Issue 8: a damaged file must not send the equation to the torch executor for good."""
    matmul()
    path = the_module(triton_backend)
    data = path.read_bytes()
    as_if_new_process(path.stem)
    path.write_bytes(b"\xff\xfe\x80 not utf-8 \xc3\x28\n")
    runs_einc_s_source(path, data)


def test_no_bytecode_is_written_into_the_cache(triton_backend, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)     # as in most environments
    matmul()
    assert not (triton_backend / "cache" / "kernels" / "__pycache__").exists()
    assert not list((triton_backend / "cache" / "kernels").glob("*.tmp"))


def test_clearing_leaves_what_a_pycache_link_points_at(triton_backend, tmp_path):
    """An older einc's bytecode folder is emptied on clear; a link of that name is not
    followed, so clear deletes no einc_*.pyc file in the folder it points at, outside the cache."""
    from einc.runtime.triton_executor import diskcache
    matmul()
    kernels = triton_backend / "cache" / "kernels"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "einc_a.pyc").write_bytes(b"not ours")
    (kernels / "__pycache__").symlink_to(elsewhere)
    count, _ = diskcache.clear(kernels)
    assert count >= 1 and (elsewhere / "einc_a.pyc").exists()


def test_triton_runs_the_verified_source_even_when_the_file_changes_after_loading(triton_backend):
    """Triton (its @jit and the interpreter's rewrite at launch) reads source by file name:
    it gets the source einc verified, not what the file holds later."""
    import torch

    from einc.planner.equation import parse
    from einc.planner.graph import build
    from einc.planner.plan import build_plan
    from einc.runtime import triton_executor
    triton_executor.use_interpreter()
    shapes = [(3, 4, 5), (3, 4, 5)]
    plan = build_plan(build(parse("bij,bij->b"), shapes))
    (kernel,) = triton_executor.kernels(plan, torch.float32, shapes)
    source = kernel.source
    module = loader.load(kernel.name, source)
    path = Path(module.__file__)
    assert path.read_text() == source
    marker = triton_backend / "pwned"
    planted = source.replace("    pid = tl.program_id(0)\n",
                             f"    pid = tl.program_id(0)\n    {payload(marker).strip()}\n", 1)
    assert planted != source
    path.write_text(planted)                   # before the first launch
    ops = [torch.randn(s) for s in shapes]
    torch.testing.assert_close(module.launch(*ops), torch.einsum("bij,bij->b", *ops))
    assert not marker.exists()
    jitted = getattr(module, kernel.name)
    assert inspect.getsource(jitted.fn) in source and "pwned" not in inspect.getsource(jitted.fn)
    path.unlink()                              # evicted by another process: still readable
    assert inspect.getsource(jitted.fn) in source


def test_a_module_that_cannot_be_written_runs_from_memory_with_one_warning(fresh, monkeypatch):
    folder = diskcache.kernel_dir()
    marker = fresh / "pwned"
    (folder / "einc_test_ro.py").write_text(payload(marker) + "VALUE = 'planted'\n")

    def refuse(path, data):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(diskcache, "write", refuse)
    with pytest.warns(RuntimeWarning, match="cannot write kernel modules"):
        module = loader.load("einc_test_ro", source_of("einc_test_ro"))
    assert module.VALUE == "einc_test_ro" and not marker.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loader.load("einc_test_ro2", source_of("einc_test_ro2")).VALUE == "einc_test_ro2"


# ----------------------------------------------------------------------- a private folder

@pytest.mark.parametrize("umask", [0o000, 0o277])
@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_the_cache_folders_are_created_private(fresh, monkeypatch, umask):
    root = fresh / "a" / "b"
    monkeypatch.setenv("EINC_CACHE_DIR", str(root))
    old = os.umask(umask)
    try:
        path = diskcache.store("einc_test_private", source_of("einc_test_private"))
    finally:
        os.umask(old)
    assert path.parent == root / "kernels"
    assert mode(root) == 0o700 and mode(root / "kernels") == 0o700
    assert mode(path) & 0o077 == 0


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners")
def test_a_shared_world_writable_folder_of_someone_else_is_refused(fresh, monkeypatch):
    shared = someone_elses_shared_folder(fresh, monkeypatch)
    with pytest.warns(RuntimeWarning, match=f"refusing the kernel cache folder {shared}: it belongs to user id") as got:
        folder = diskcache.kernel_dir()
    assert len([w for w in got if issubclass(w.category, RuntimeWarning)]) == 1
    assert folder == fresh / "tmp" / f"einc-{os.geteuid()}" / "kernels"
    assert mode(folder) == 0o700 and mode(folder.parent) == 0o700
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # one warning per process, not one per kernel
        module = loader.load("einc_test_shared", source_of("einc_test_shared"))
    assert Path(module.__file__).parent == folder and os.listdir(shared) == []
    assert mode(shared) == 0o777                # not einc's to change


@pytest.mark.parametrize("create", [True, False])
def test_a_folder_under_a_file_is_refused_by_name(fresh, monkeypatch, create):
    """EINC_CACHE_DIR=a/file/sub: refused once, saying what is wrong (a part of the path is a
    file), rather than "cannot write kernel modules to None ([Errno 17] File exists)" and the
    path tried again for every kernel."""
    (fresh / "afile").write_text("")
    monkeypatch.setenv("EINC_CACHE_DIR", str(fresh / "afile" / "sub"))
    with pytest.warns(RuntimeWarning, match=f"refusing the kernel cache folder {fresh / 'afile' / 'sub'}: a part "
                                            "of its path is a file, not a folder") as got:
        folder = diskcache.kernel_dir(create=create)
    assert [w.filename for w in got] == [__file__]          # the caller's line, not einc's
    assert folder == fresh / "tmp" / f"einc-{os.geteuid()}" / "kernels"
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # one warning, and the kernels go to the fallback
        module = loader.load("einc_test_under_a_file", source_of("einc_test_under_a_file"))
    assert Path(module.__file__).parent == folder


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_your_own_folder_that_others_can_write_is_refused_and_left_alone(fresh, monkeypatch):
    mine = fresh / "mine"
    mine.mkdir()
    os.chmod(mine, 0o777)
    monkeypatch.setenv("EINC_CACHE_DIR", str(mine))
    with pytest.warns(RuntimeWarning, match=r"others can write it \(mode 0777\).*chmod 700"):
        folder = diskcache.kernel_dir()
    assert folder.parent != mine and mode(mine) == 0o777 and os.listdir(mine) == []


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_the_default_folder_and_kernels_folder_are_einc_s_and_made_private(fresh, monkeypatch):
    monkeypatch.delenv("EINC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(fresh / "xdg"))
    kernels = fresh / "xdg" / "einc" / "kernels"
    kernels.mkdir(parents=True)
    os.chmod(kernels.parent, 0o777)
    os.chmod(kernels, 0o775)
    with pytest.warns(RuntimeWarning, match="einc made it private"):
        assert diskcache.kernel_dir() == kernels
    assert mode(kernels.parent) == 0o700 and mode(kernels) == 0o700


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners")
def test_an_unsafe_fallback_gives_a_fresh_private_folder(fresh, monkeypatch):
    someone_elses_shared_folder(fresh, monkeypatch)
    elsewhere = fresh / "elsewhere"
    elsewhere.mkdir()
    (fresh / "tmp" / f"einc-{os.geteuid()}").symlink_to(elsewhere)    # planted before us
    with pytest.warns(RuntimeWarning, match="refusing"):
        folder = diskcache.kernel_dir()
    assert folder.parent.parent == fresh / "tmp" and folder.parent.name.startswith(f"einc-{os.geteuid()}-")
    assert mode(folder.parent) == 0o700 and os.listdir(elsewhere) == []


def test_cache_path_does_not_create_the_folder(fresh, capsys):
    assert main(["cache", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(fresh / "cache" / "kernels")
    assert not (fresh / "cache").exists()


# ----------------------------------------------------------------------- settings

BAD = [
    ("EINC_CACHE_SIZE", "-1", config.cache_size, "a positive integer (the number of plans kept in memory"),
    ("EINC_CACHE_SIZE", "0", config.cache_size, "a positive integer"),
    ("EINC_CACHE_SIZE", "abc", config.cache_size, "a positive integer"),
    ("EINC_CACHE_SIZE", "1e3", config.cache_size, "a positive integer"),
    ("EINC_CACHE_SIZE", "2.5", config.cache_size, "a positive integer"),
    ("EINC_CACHE_MAX_MB", "0", config.cache_max_bytes, "a positive number of megabytes"),
    ("EINC_CACHE_MAX_MB", "-5", config.cache_max_bytes, "a positive number of megabytes"),
    ("EINC_CACHE_MAX_MB", "lots", config.cache_max_bytes, "a positive number of megabytes"),
    ("EINC_CACHE_MAX_MB", "inf", config.cache_max_bytes, "a positive number of megabytes"),
    ("EINC_CACHE_MAX_MB", "nan", config.cache_max_bytes, "a positive number of megabytes"),
    ("EINC_CACHE_DIR", "relative/kernels", config.cache_dir, "an absolute path (~ is expanded"),
    ("EINC_BACKEND", "cuda", config.backend, "one of auto (kernels for CUDA tensors), torch"),
    ("EINC_DEBUG", "maybe", config.debug, "one of 1, true, yes, on (tracebacks) or 0, false, no, off"),
]


@pytest.mark.parametrize("name, value, read, expected", BAD, ids=[f"{n}={v}" for n, v, _, _ in BAD])
def test_a_bad_setting_names_the_variable_its_value_and_what_is_accepted(monkeypatch, name, value, read, expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        read()
    assert str(err.value).startswith(f"{name}={value!r}: expected {expected}")
    assert isinstance(err.value, ValueError) and isinstance(err.value, EincError)


@pytest.mark.parametrize("name, read, default", [
    ("EINC_CACHE_SIZE", config.cache_size, 4096),
    ("EINC_CACHE_MAX_MB", config.cache_max_bytes, 100 * 10 ** 6),
    ("EINC_BACKEND", config.backend, "auto"),
    ("EINC_DEBUG", config.debug, False),
])
def test_unset_or_empty_settings_take_their_defaults(monkeypatch, name, read, default):
    monkeypatch.delenv(name, raising=False)
    assert read() == default
    monkeypatch.setenv(name, "")
    assert read() == default


def test_good_settings_are_read(monkeypatch):
    monkeypatch.setenv("EINC_CACHE_SIZE", " 12 ")
    monkeypatch.setenv("EINC_CACHE_MAX_MB", "0.5")
    monkeypatch.setenv("EINC_BACKEND", "Triton")
    monkeypatch.setenv("EINC_DEBUG", "yes")
    assert (config.cache_size(), config.cache_max_bytes(), config.backend(), config.debug()) == \
        (12, 500_000, "triton", True)


def test_a_bad_cache_size_fails_at_first_use_naming_it():
    """EINC_CACHE_SIZE=-1 is a ConfigError naming the variable at the first call, not a
    KeyError ('dictionary is empty') from inside the cache later."""
    code = "import torch, einc\neinc.einsum('ij->i', torch.ones(2, 2))\n"
    env = dict(os.environ, EINC_CACHE_SIZE="-1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert "ConfigError: EINC_CACHE_SIZE='-1': expected a positive integer" in done.stderr
    assert "dictionary is empty" not in done.stderr


def test_tilde_is_expanded_and_never_makes_a_folder_named_tilde(fresh, monkeypatch):
    home, work = fresh / "home", fresh / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    monkeypatch.setenv("EINC_CACHE_DIR", "~/kernel-cache")
    assert config.cache_dir() == home / "kernel-cache"
    assert diskcache.kernel_dir() == home / "kernel-cache" / "kernels"
    assert (home / "kernel-cache" / "kernels").is_dir() and os.listdir(work) == []


def test_xdg_cache_home_is_used_when_absolute_and_ignored_when_relative(fresh, monkeypatch):
    monkeypatch.delenv("EINC_CACHE_DIR")
    monkeypatch.setenv("HOME", str(fresh / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(fresh / "xdg"))
    assert config.cache_dir() == fresh / "xdg" / "einc"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert config.cache_dir() == fresh / "home" / ".cache" / "einc"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert config.cache_dir() == fresh / "home" / ".cache" / "einc"


@pytest.mark.parametrize("value", ["1", "0", "true", "TRUE", "yes", "YES", "on", "y", "Y", "t", "2",
                                   " 1", "1 ", "false", "off", "no", "abc"])
def test_triton_interpret_is_read_exactly_as_triton_reads_it(monkeypatch, value):
    knobs = pytest.importorskip("triton.knobs")
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert config.triton_interpret() is bool(knobs.runtime.interpret)


@pytest.mark.parametrize("value", ["0", "no", "false"])
def test_a_false_triton_interpret_is_not_taken_for_true(triton_backend, monkeypatch, value):
    """EINC_BACKEND=triton with TRITON_INTERPRET=0: CPU tensors stay on the torch executor,
    with one warning saying why (before, any value counted as 1)."""
    monkeypatch.setenv("TRITON_INTERPRET", value)
    with pytest.warns(RuntimeWarning, match="false value"):
        matmul()
    assert not list((triton_backend / "cache").rglob("einc_*.py"))      # no kernel was generated
    assert os.environ["TRITON_INTERPRET"] == value                     # and the setting left alone


def test_a_bad_setting_raises_when_kernels_are_built(triton_backend, monkeypatch):
    """A bad EINC_CACHE_DIR is the user's to fix: an error naming it, not a silent fallback."""
    monkeypatch.setenv("EINC_CACHE_DIR", "relative/folder")
    with pytest.raises(ConfigError, match="EINC_CACHE_DIR='relative/folder'"):
        matmul()


def test_triton_interpret_unset_or_empty_is_none(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert config.triton_interpret() is None
    monkeypatch.setenv("TRITON_INTERPRET", "")
    assert config.triton_interpret() is None


# ----------------------------------------------------------------------- a bounded folder

def test_eviction_deletes_the_least_recently_used_modules(fresh, monkeypatch):
    monkeypatch.setenv("EINC_CACHE_MAX_MB", "0.0035")            # room for three 1000-byte modules
    folder = diskcache.kernel_dir()
    names = ["einc_test_a", "einc_test_b", "einc_test_c"]
    for age, name in enumerate(names):
        diskcache.store(name, source_of(name))
        os.utime(folder / f"{name}.py", (1000 + age, 1000 + age))   # a is the oldest
    assert loader.load("einc_test_a", source_of("einc_test_a")).VALUE == "einc_test_a"   # a used again
    diskcache.store("einc_test_d", source_of("einc_test_d"))
    assert sorted(p.stem for p in folder.glob("*.py")) == ["einc_test_a", "einc_test_c", "einc_test_d"]
    assert diskcache.usage(folder) == (folder, 3, 3000, 3500)


def test_the_module_just_written_is_kept_even_above_the_bound(fresh, monkeypatch):
    monkeypatch.setenv("EINC_CACHE_MAX_MB", "0.0005")
    folder = diskcache.kernel_dir()
    for name in ("einc_test_x", "einc_test_y"):
        diskcache.store(name, source_of(name))
    assert [p.stem for p in folder.glob("*.py")] == ["einc_test_y"]


def test_eviction_removes_temporary_files_left_by_killed_writers(fresh):
    folder = diskcache.kernel_dir()
    stale, live = folder / ".einc_test_old.abc.tmp", folder / ".einc_test_new.def.tmp"
    stale.write_text("partial")
    live.write_text("being written")
    os.utime(stale, (0, 0))
    diskcache.store("einc_test_t", source_of("einc_test_t"))
    assert not stale.exists() and live.exists()


WORKER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from einc.runtime.triton_executor import loader
    worker, count, shared, gate = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "same", Path(sys.argv[4])
    while not gate.exists():
        time.sleep(0.01)
    for i in range(count):
        name = f"einc_test_{'all' if shared else worker}_{i:02d}"
        head = f"VALUE = {name!r}\\n"
        source = head + "#" * (1000 - len(head) - 1) + "\\n"
        assert loader.load(name, source).VALUE == name
""")


@pytest.mark.parametrize("same", [False, True], ids=["distinct-kernels", "same-kernels"])
def test_concurrent_writers_keep_the_bound_and_leave_whole_files(fresh, monkeypatch, same):
    monkeypatch.setenv("EINC_CACHE_MAX_MB", "0.0055")            # five 1000-byte modules
    gate = fresh / "go"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(w), "15", "same" if same else "distinct",
                                 str(gate)], env=env, stderr=subprocess.PIPE, text=True) for w in range(4)]
    gate.touch()
    for w in workers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    folder = fresh / "cache" / "kernels"
    files = sorted(folder.iterdir())
    assert files and all(p.suffix == ".py" and p.name.startswith("einc_test_") for p in files)   # no .tmp
    assert all(p.read_text() == source_of(p.stem) for p in files)                                  # whole files
    assert sum(p.stat().st_size for p in files) <= 5500


def test_cache_list_shows_usage_against_the_bound(fresh, monkeypatch, capsys):
    monkeypatch.setenv("EINC_CACHE_MAX_MB", "0.01")
    assert main(["cache", "list"]) == 0
    assert "(bound 0.01 MB, EINC_CACHE_MAX_MB)" in capsys.readouterr().out
    diskcache.store("einc_test_listed", source_of("einc_test_listed", 1024))
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "einc_test_listed" in out and "1 module(s), 1.0 KiB" in out
    assert "10.2% of the 0.01 MB bound (EINC_CACHE_MAX_MB" in out


def test_cache_commands_report_a_bad_setting_in_one_line(fresh, monkeypatch, capsys):
    monkeypatch.setenv("EINC_CACHE_MAX_MB", "ten")
    assert main(["cache", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("einc cache: error: EINC_CACHE_MAX_MB='ten': expected a positive number") and \
        len(err.strip().splitlines()) == 1
    monkeypatch.delenv("EINC_CACHE_MAX_MB")
    monkeypatch.setenv("EINC_CACHE_DIR", "~nosuchuser-einc/x")      # ~ that cannot expand: relative
    assert main(["cache", "path"]) == 2
    assert "EINC_CACHE_DIR='~nosuchuser-einc/x': expected an absolute path" in capsys.readouterr().err
