"""Real libraries' own test suites with einc installed as ``torch.einsum``.

For each library: install the pinned version (``--install``: ``pip install --no-deps``,
so pip never replaces the running torch; the libraries' other dependencies are named
here and installed alike), find its tests (shipped inside the package, or in its sdist,
fetched with ``pip download`` into the scratch folder, or in its repository at the
version's tag, cloned with git), then run them twice with pytest in
subprocesses of this interpreter: unpatched, and patched (the plugin
``bench/einc_patch_plugin.py``, loaded with ``-p``, installs ``torch.einsum =
einc.einsum`` before the library is imported and counts the calls that reach einc).
Each run's outcome is read from its ``--junitxml`` file.  Prints a Markdown table, and
the tests that fail patched but pass unpatched with the first line of their error;
writes both, and the raw counts (JSON), into the scratch folder.  With ``--replay`` the
patched run records its distinct calls too, and each is run again on random data against
torch.einsum on float64 / complex128 copies, values and gradients
(``bench/einsum_replay.py``).

    python bench/libraries.py --install                    # every library (downloads; not in CI)
    python bench/libraries.py einops --timeout 600         # one library, already installed
    python bench/libraries.py funsor --replay              # and its distinct calls replayed
    python bench/libraries.py pyro --git pyro=/srv/pyro    # its repository's tests from a local clone

Not part of the test run (it downloads); ``tests/tools/test_libraries.py`` checks the plugin
and the parsing on a local test file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "libraries"


@dataclass
class Library:
    name: str                        # the distribution pip installs
    version: str
    deps: tuple = ()                 # installed with --no-deps too (pip leaves torch alone)
    module: str = ""                 # the import name, where it is not ``name``
    pip_args: tuple = ()             # more options for its install (--no-build-isolation: builds on this torch)
    conftest: str = ""               # written as conftest.py beside the sdist's tests (the repository has one)
    package_tests: str = ""          # tests inside the installed package: its subfolder ("" = the package)
    wheel_tests: tuple = ()          # or these paths beside the package (a wheel's top-level tests/ folder)
    sdist_tests: tuple = ()          # else: these paths of the sdist (extracted into the scratch folder)
    git_tests: tuple = ()            # or these paths of the repository's tag ``version`` (not in its sdist)
    git: str = ""                    # that repository's URL (--git NAME=URL: another, a local mirror)
    env: dict = field(default_factory=dict)
    pytest_args: tuple = ()
    note: str = ""

    @property
    def import_name(self) -> str:
        return self.module or self.name


FUNSOR_DEPS = ("pyro-ppl==1.9.1", "pyro-api", "makefun", "multipledispatch", "tqdm", "numpy", "opt_einsum",
               "typing_extensions")
FUNSOR_CONFTEST = """\
import os

import numpy
import torch

import funsor

funsor.set_backend(os.environ.get("FUNSOR_BACKEND", "numpy"))


def pytest_runtest_setup(item):
    numpy.random.seed(0)
    torch.manual_seed(0)
    if funsor.get_backend() == "torch":
        torch.set_default_dtype(torch.float64)
"""

LIBRARIES = {
    "einops": Library("einops", "0.8.2", package_tests="tests", env={"EINOPS_TEST_BACKENDS": "torch"},
                      note="its whole suite (einops/tests, shipped in the wheel), torch backend"),
    "tensorly": Library("tensorly", "0.10.0", deps=("numpy", "scipy"), package_tests="",
                        env={"TENSORLY_BACKEND": "pytorch"},
                        note="its whole suite (the tests/ folders shipped in the wheel), pytorch backend"),
    "tensorly-einsum": Library("tensorly", "0.10.0", deps=("numpy", "scipy"), package_tests="",
                               env={"TENSORLY_BACKEND": "pytorch", "TENSORLY_TENALG_BACKEND": "einsum"},
                               note="the same suite with tensorly's einsum tensor algebra (mode_dot, "
                                    "khatri_rao, kronecker, ... as einsums): TENSORLY_TENALG_BACKEND=einsum"),
    "e3nn": Library("e3nn", "0.6.0", deps=("sympy", "scipy", "opt_einsum_fx==0.1.4", "opt_einsum", "packaging"),
                    sdist_tests=("tests",),
                    pytest_args=("tests/o3/tensor_product_test.py", "tests/o3/linear_test.py", "tests/o3/norm_test.py",
                                 "tests/nn/fc_test.py", "tests/nn/gate_test.py", "tests/util/test_jit.py",
                                 "-k", "not test_normalized"),
                    note="the einsum-heavy part of tests/ from the sdist: tensor products (codegen through "
                         "opt_einsum_fx and torch.fx, TorchScript), linear, norm, fc, gate, e3nn's jit "
                         "utilities; without test_normalized (7 min alone on 2 cores)"),
    "opt_einsum": Library("opt_einsum", "3.4.0", package_tests="tests",
                          note="its whole suite (opt_einsum/tests, in the wheel): the torch backend's tests "
                               "contract many-operand equations pairwise, each step torch.einsum or tensordot, "
                               "with constants and shared intermediates"),
    "tensorly-torch": Library("tensorly-torch", "0.5.0", module="tltorch", deps=("tensorly==0.10.0", "numpy", "scipy"),
                              package_tests="", env={"TENSORLY_BACKEND": "pytorch",
                                                     "TENSORLY_TENALG_BACKEND": "einsum"},
                              note="its whole suite (the tests/ folders in the wheel) with tensorly's einsum "
                                   "tensor algebra: factorized layers and tensors (CP, Tucker, TT, TTM) contracted "
                                   "by einsum, with gradients"),
    "torch-harmonics": Library("torch_harmonics", "0.8.0", deps=("parameterized",), pip_args=("--no-build-isolation",),
                               sdist_tests=("tests",), pytest_args=("tests/test_sht.py", "tests/test_convolution.py",
                                                                    "tests/test_attention.py"),
                               note="tests/ from the sdist (0.8.0: the newest sdist whose metadata builds without "
                                    "torch): spherical harmonic transforms (`...km,mlk->...lm` on strided slices, "
                                    "double precision gradcheck), DISCO convolutions, neighborhood attention"),
    "funsor": Library("funsor", "0.4.8", deps=FUNSOR_DEPS,
                      sdist_tests=("test",), env={"FUNSOR_BACKEND": "torch"}, conftest=FUNSOR_CONFTEST,
                      pytest_args=("test/test_einsum.py", "test/test_adjoint.py", "test/test_optimizer.py"),
                      note="test/ from the sdist, the einsum part, torch backend: einsums and their adjoints "
                           "(marginals, samples, MAP) under pyro.ops.einsum's semirings (log, map, sample, "
                           "marginal) and plated sum-products, against opt_einsum; the sdist leaves out the "
                           "repository's test/conftest.py, so the script writes one that chooses the backend "
                           "(FUNSOR_BACKEND), float64 by default, and seeds each test"),
    "funsor-sum-product": Library("funsor", "0.4.8", deps=FUNSOR_DEPS, sdist_tests=("test",),
                                  env={"FUNSOR_BACKEND": "torch"}, conftest=FUNSOR_CONFTEST,
                                  pytest_args=("test/test_sum_product.py",),
                                  note="test/test_sum_product.py from the sdist, torch backend, set up as for "
                                       "funsor: sum-products over plates, Markov chains and their "
                                       "parallel-scan, sequential and modified partial forms, contracted by "
                                       "funsor's einsum (pyro.ops.einsum's semirings, opt_einsum's paths) "
                                       "against its own naive forms"),
    "pyro": Library("pyro-ppl", "1.9.1", module="pyro", deps=("pyro-api", "opt_einsum", "tqdm", "numpy"),
                    git="https://github.com/pyro-ppl/pyro", pytest_args=("tests/ops",),
                    git_tests=("tests/__init__.py", "tests/common.py", "tests/conftest.py", "tests/ops"),
                    note="tests/ops of the repository's tag 1.9.1 (its sdist has no tests), with tests/'s "
                         "conftest (float64 by default, seeded): pyro.ops.einsum's semirings (log, MAP, "
                         "sample, marginal adjoints), contract and ubersum over plates, packed and "
                         "Gaussian ops, against their naive forms"),
    "neuraloperator": Library("neuraloperator", "2.0.0", module="neuralop",
                              deps=("tensorly==0.10.0", "tensorly-torch==0.5.0", "opt_einsum", "zencfg", "configmypy",
                                    "ruamel.yaml", "h5py", "numpy", "scipy"),
                              package_tests="layers/tests", pytest_args=("-k", "spectral or spherical or fno_block"),
                              note="the spectral layers' tests in the wheel (neuralop/layers/tests: spectral, "
                                   "legacy spectral and spherical convolutions, FNO blocks): complex64 einsums "
                                   "of Fourier coefficients with dense, CP, Tucker and TT weights, through "
                                   "tensorly's opt_einsum plugin"),
    "pennylane": Library("pennylane", "0.45.1", deps=("autoray==0.11.0", "rustworkx", "autograd<1.9", "appdirs",
                                                     "cachetools", "tomlkit", "diastatic-malt", "termcolor", "gast",
                                                     "networkx", "requests", "typing_extensions", "packaging",
                                                     "pytest-rng", "numpy", "scipy"),
                         wheel_tests=("tests/devices/qubit", "tests/devices/qubit_mixed",
                                      "tests/devices/default_qubit/test_default_qubit.py",
                                      "tests/devices/test_default_mixed.py", "tests/math"),
                         pytest_args=("-m", "torch"),
                         note="its tests marked torch (the tests/ folder its wheel installs beside the package) "
                              "of the state-vector and density-matrix simulators (default.qubit, default.mixed: "
                              "gates applied to complex128 states by einsum, measurements, with gradients) and "
                              "qml.math; with autoray 0.11.0 (quimb's and cotengra's) where it pins 0.8.4, "
                              "and without pennylane-lightning"),
    "quimb": Library("quimb", "1.15.0", deps=("autoray==0.11.0", "cotengra==0.8.3", "cytoolz", "toolz", "numba",
                                               "llvmlite", "psutil", "tqdm", "numpy", "scipy"),
                     sdist_tests=("tests",),
                     pytest_args=("tests/test_tensor/test_optimizers.py",
                                  "tests/test_tensor/test_circuit/test_exact.py", "tests/test_tensor/test_decomp.py",
                                  "-k", "torch"),
                     note="the torch-backend tests of tests/ from the sdist: tensor network optimizers "
                          "(complex MBL Hamiltonians, parametrized circuits, with gradients), exact circuit "
                          "simulation and decompositions; without tests/test_tensor/test_tn2d/test_tebd.py's "
                          "(its full update alone 341 s on 2 cores)"),
}


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)


def torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def install(lib: Library) -> None:
    before = torch_version()
    pip("--no-deps", *lib.pip_args, f"{lib.name}=={lib.version}", *lib.deps)
    after = torch_version()
    if after != before:
        sys.exit(f"installing {lib.name} changed torch from {before} to {after}")


def installed_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def fetch_git(lib: Library, root: Path, url: str) -> None:
    """``lib.git_tests`` of the tag ``lib.version`` of the repository at ``url`` into ``root``."""
    clone = root.parent / (root.name + ".clone")
    shutil.rmtree(clone, ignore_errors=True)
    source = f"file://{Path(url).resolve()}" if Path(url).exists() else url    # file://: --depth applies
    subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "-q", "--depth", "1", "--branch", lib.version,
                    source, str(clone)], check=True)
    for p in lib.git_tests:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (clone / p).is_dir() else shutil.copy2)(clone / p, root / p)
    shutil.rmtree(clone)


def extract_sdist(lib: Library, root: Path, scratch: Path) -> None:
    """``lib.sdist_tests`` of its sdist (``pip download``) into ``root``."""
    download = scratch / "sdist"
    download.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                    "-d", str(download), f"{lib.name}=={lib.version}"], check=True)
    archive = next(download.glob(f"{lib.name}-{lib.version}.tar.gz"))
    prefix = f"{lib.name}-{lib.version}/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if any(m.name.startswith(prefix + p + "/") for p in lib.sdist_tests)]
        for m in members:
            m.name = m.name[len(prefix):]
        tar.extractall(root, members=members, filter="data")


def locate_tests(lib: Library, scratch: Path, git_url: str = "") -> tuple[Path, list[str]]:
    """(the folder pytest runs in, its arguments) for ``lib``'s tests."""
    if not (lib.sdist_tests or lib.git_tests):
        module = lib.import_name
        where = f"import {module}, os; print(os.path.dirname({module}.__file__))"
        out = subprocess.run([sys.executable, "-c", where], capture_output=True, text=True, check=True)
        package = Path(out.stdout.strip())
        if lib.wheel_tests:
            return package.parent, [*lib.wheel_tests, *lib.pytest_args]
        target = package / lib.package_tests if lib.package_tests else package
        return package.parent, [str(target.relative_to(package.parent)), *lib.pytest_args]
    root = scratch / f"{lib.name}-{lib.version}-tests"
    if not root.exists():
        tmp = scratch / (root.name + ".part")
        shutil.rmtree(tmp, ignore_errors=True)
        if lib.git_tests:
            fetch_git(lib, tmp, git_url or lib.git)
        else:
            extract_sdist(lib, tmp, scratch)
        for folder in lib.sdist_tests if lib.conftest else ():
            (tmp / folder / "conftest.py").write_text(lib.conftest)
        tmp.rename(root)    # only the tests: the installed package is the one imported
    return root, list(lib.pytest_args or lib.sdist_tests or lib.git_tests)


@dataclass
class Run:
    tests: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    returncode: int = 0
    outcomes: dict = field(default_factory=dict)     # test id -> (outcome, first line of its message)
    counts: dict | None = None
    complete: bool = True           # False: interrupted at the timeout (the tests run by then), or no junit file


_KINDS = {"failure": "failed", "error": "error", "skipped": "skipped"}
_RANK = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}


def parse_junit(path: Path) -> Run:
    """Counts and per-test outcomes from a pytest junit XML file (an error in setup or
    teardown is an error; a test with both a failure and a teardown error counts once, as
    a failure; an xfail is a skip)."""
    run = Run()
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname') or ''}::{case.get('name') or ''}"
        outcome, message = "passed", ""
        for child in case:
            kind = _KINDS.get(child.tag)
            if kind is not None and _RANK[kind] > _RANK[outcome]:
                lines = (child.get("message") or child.text or "").strip().splitlines()
                outcome, message = kind, lines[0][:200] if lines else ""
        if test_id in run.outcomes:     # the same id twice (rare): keep both
            test_id += f" #{len(run.outcomes)}"
        run.outcomes[test_id] = (outcome, message)
    for outcome, _ in run.outcomes.values():
        run.tests += 1
        field_name = "errors" if outcome == "error" else outcome
        setattr(run, field_name, getattr(run, field_name) + 1)
    return run


def _hear_ctrl_c() -> None:
    """In the child, before pytest starts: SIGINT back to its default, which Python turns
    into KeyboardInterrupt. A process started in the background by a shell without job
    control (``nox ... &``) ignores SIGINT, and its children inherit that, so the timeout's
    SIGINT would go unheard and the run be killed without its junit file."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_pytest(cwd: Path, args: list[str], env: dict, patched: bool, out: Path, label: str,
               timeout: float = 900, record: bool = False) -> Run:
    """One pytest run in a subprocess: junit XML and (patched) the plugin's counts in ``out``,
    and (``record``) its distinct calls, in ``<label>.calls.json``."""
    out.mkdir(parents=True, exist_ok=True)
    junit, counts, calls = out / f"{label}.xml", out / f"{label}.counts.json", out / f"{label}.calls.json"
    for p in (junit, counts, calls):
        p.unlink(missing_ok=True)
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [full_env.get("PYTHONPATH")])])
    ini = out / "pytest.ini"        # no ini file found above cwd (einc's own pyproject) applies
    ini.write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini), f"--rootdir={cwd}",
               "--continue-on-collection-errors", f"--junitxml={junit}", "-o", "junit_family=xunit2"]
    if patched:
        command += ["-p", "einc_patch_plugin"]
        full_env["EINC_PATCH_COUNTS"] = str(counts)
        if record:
            full_env["EINC_PATCH_RECORD"] = str(calls)
    command += args
    start, interrupted = time.perf_counter(), False
    with subprocess.Popen(command, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, preexec_fn=_hear_ctrl_c if os.name == "posix" else None) as proc:
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # as Ctrl-C: pytest stops and still writes the junit file of the tests it ran
            proc.send_signal(signal.SIGINT)
            try:
                log, _ = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                log, _ = proc.communicate()
            log, interrupted = f"[interrupted after {timeout:.0f} s]\n{log}", True
        returncode = proc.returncode
    seconds = time.perf_counter() - start
    (out / f"{label}.log").write_text(log)
    if not junit.exists():      # killed at the timeout, or pytest failed before the run
        print(f"{label}: pytest wrote no junit file (exit {returncode}); see {out / (label + '.log')}",
              file=sys.stderr, flush=True)
        return Run(seconds=seconds, returncode=returncode, complete=False)
    run = parse_junit(junit)
    run.seconds, run.returncode, run.complete = seconds, returncode, not interrupted
    if counts.exists():
        run.counts = json.loads(counts.read_text())
    return run


def regressions(unpatched: Run, patched: Run) -> list[tuple[str, str, str]]:
    """(test, patched outcome, its message) for tests that pass unpatched and fail or error patched."""
    return [(t, outcome, message) for t, (outcome, message) in patched.outcomes.items()
            if outcome in ("failed", "error") and unpatched.outcomes.get(t, ("",))[0] == "passed"]


def row(name: str, version: str, unpatched: Run, patched: Run) -> str:
    def cells(r):
        if not r.complete and not r.tests:
            return f"no result (exit {r.returncode})"
        return f"{r.passed} / {r.failed} / {r.errors} / {r.skipped}" + ("" if r.complete else " (interrupted)")
    c = patched.counts or {}
    reached = f"{c.get('calls', 0):,} ({c.get('torch_op', 0):,} by torch's op; {c.get('equations', 0):,} equations)"
    return (f"| {name} | {version} | {max(unpatched.tests, patched.tests)} | {cells(unpatched)} | {cells(patched)} | "
            f"{reached} | {unpatched.seconds:.0f} s / {patched.seconds:.0f} s |")


def replay_recorded(path: Path) -> dict:
    """The recorded calls of a patched run replayed (``bench/einsum_replay.py``)."""
    if __package__ in (None, ""):       # run as a script
        sys.path.insert(0, str(HERE.parent))
    from bench.einsum_replay import replay  # imports einc: only where asked
    return replay(json.loads(path.read_text()) if path.exists() else {})


def replay_line(name: str, replayed: dict) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(replayed["dtypes"].items(), key=lambda kv: -kv[1]))
    return (f"**{name}** replayed: {replayed['replayed']} distinct calls ({kinds}; {replayed['with_gradients']} "
            f"with gradients; {replayed['left_out']} left out as too large; {replayed['torch_refused']} that "
            f"torch.einsum refused as recorded), {len(replayed['flagged'])} flagged"
            + "".join(f"\n- `{key}`: {why}" for key, why in replayed["flagged"]))


HEADER = ("| library | version | tests | unpatched passed / failed / errors / skipped | "
          "patched passed / failed / errors / skipped | calls reaching einc | time unpatched / patched |\n"
          "|---|---|---|---|---|---|---|")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("libraries", nargs="*", help=f"default: all ({', '.join(LIBRARIES)})")
    parser.add_argument("--install", action="store_true", help="pip install the pinned versions first")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="scratch folder (default bench/results/libraries)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per pytest run (default 900)")
    parser.add_argument("--git", action="append", default=[], metavar="NAME=URL",
                        help="fetch library NAME's repository tests from URL (a clone or mirror) instead")
    parser.add_argument("--replay", action="store_true",
                        help="record the patched run's distinct calls and replay them against float64 copies")
    args = parser.parse_args(argv)
    names = args.libraries or list(LIBRARIES)
    unknown = [n for n in names if n not in LIBRARIES]
    if unknown:
        parser.error(f"unknown libraries {unknown}; known: {list(LIBRARIES)}")
    git_urls = dict(g.split("=", 1) for g in args.git)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, details, raw = [], [], {}
    for name in names:
        lib = LIBRARIES[name]
        if args.install:
            install(lib)
        version = installed_version(lib.name)
        if version is None:
            sys.exit(f"{lib.name} is not installed: pass --install")
        cwd, pytest_args = locate_tests(lib, args.out, git_urls.get(name, ""))
        print(f"{name} {version}: {lib.note}", file=sys.stderr, flush=True)
        unpatched = run_pytest(cwd, pytest_args, lib.env, False, args.out, f"{name}-unpatched", args.timeout)
        patched = run_pytest(cwd, pytest_args, lib.env, True, args.out, f"{name}-patched", args.timeout,
                             args.replay)
        rows.append(row(name, version, unpatched, patched))
        if not (unpatched.complete and patched.complete):
            details.append(f"**{name}**: a run was interrupted at the timeout ({args.timeout:.0f} s) or gave "
                           "no result; the comparison covers the tests both runs reached")
        lost = regressions(unpatched, patched)
        details.append(f"**{name}**: {len(lost)} tests fail patched and pass unpatched"
                       + "".join(f"\n- `{t}` ({o}): {m}" for t, o, m in lost))
        kept = ("tests", "passed", "failed", "errors", "skipped", "seconds")
        raw[name] = {"version": version, "note": lib.note, "args": pytest_args,
                     "unpatched": {k: getattr(unpatched, k) for k in kept},
                     "patched": {k: getattr(patched, k) for k in kept},
                     "counts": patched.counts, "regressions": lost,
                     "complete": unpatched.complete and patched.complete}
        if args.replay:
            raw[name]["replay"] = replayed = replay_recorded(args.out / f"{name}-patched.calls.json")
            details.append(replay_line(name, replayed))
        print(rows[-1], file=sys.stderr, flush=True)
    text = "\n".join([HEADER, *rows, "", *details, ""])
    print(text)
    (args.out / "libraries.md").write_text(text)
    (args.out / "libraries.json").write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
