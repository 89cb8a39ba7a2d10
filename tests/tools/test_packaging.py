"""The package as users get it: a wheel, installed outside the source tree.

``test_the_wheel_works_outside_the_source_tree`` is CI's wheel check (``.ci/run`` runs
the whole test suite): it builds the wheel from a copy of the sources (no network, no
build isolation: the running environment's setuptools), installs it with ``pip install
--no-deps --target`` into a temporary folder, and from a folder outside the source tree,
with only that folder on ``PYTHONPATH`` (torch and opt_einsum come from the running
environment), runs an einsum, ``einc explain``, ``einc dump --suite`` and a tiny ``einc
bench``.
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_packaged_suite_is_the_suite_of_bench():
    """einc/tools/benchmark/suite.json (shipped in the wheel) is the one copy; bench/suite.json links to it."""
    packaged, bench = ROOT / "einc" / "tools" / "benchmark" / "suite.json", ROOT / "bench" / "suite.json"
    assert bench.is_symlink() and bench.resolve() == packaged.resolve()
    assert not packaged.is_symlink() and len(json.loads(packaged.read_text())["workloads"]) >= 30


def test_dependencies_are_what_einc_imports():
    """numpy is a dependency: without it torch's first import warns ("Failed to initialize
    NumPy"), and einc reads a ``dtype=`` as numpy does with it (einc.runtime.dtypes, on
    first use: ``dtype=float`` is float64); tqdm is, for the progress bar of long
    sliced runs (einc.runtime.sliced); cotengra, cotengrust and kahypar for the path search
    past 16 operands (einc.planner.search, which imports them lazily)."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("<")[0].split("=")[0].strip() for d in project["dependencies"]]
    assert names == ["torch", "numpy", "opt_einsum", "tqdm", "cotengra", "cotengrust", "kahypar"]
    imported = set()
    for path in (ROOT / "einc").rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("import", "from"):
                imported.add(words[1].split(".")[0])
    assert {"torch", "numpy", "opt_einsum", "tqdm"} <= imported
    test = " ".join(project["optional-dependencies"]["test"])
    assert "numpy" in test                                  # tests/doors/test_drop_in.py uses it
    assert "setuptools>=70.1" in test                       # builds the wheel offline, without the wheel package


def _run(cmd, cwd, env, timeout=240):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder with the installed wheel, the wheel, a work folder outside the source tree, env)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"                   # a copy, so the build leaves nothing in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "einc", src / "einc", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EINC_DEBUG", "EINC_BACKEND")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", EINC_CACHE_DIR=str(tmp / "cache"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"),
          str(src)], cwd=tmp, env=env)
    (wheel,) = (tmp / "dist").glob("einc-*.whl")
    site = tmp / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
         cwd=tmp, env=env)
    work = tmp / "work"
    work.mkdir()
    env["PYTHONPATH"] = str(site)
    return site, wheel, work, env


@pytest.mark.slow
def test_the_wheel_holds_the_suite_and_the_right_requirements(installed):
    _, wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert z.read("einc/tools/benchmark/suite.json") == (ROOT / "bench" / "suite.json").read_bytes()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [ln for ln in z.read(meta).decode().splitlines() if ln.startswith("Requires-Dist:")]
    assert "einc/py.typed" in names and "einc/tools/cli.py" in names
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
    base = {r.split(":", 1)[1].strip() for r in requires if "extra ==" not in r}
    assert {b.split(">")[0].split("<")[0] for b in base} == {"torch", "numpy", "opt_einsum", "tqdm", "cotengra",
                                                              "cotengrust", "kahypar"}
    (torch_range,) = [b for b in base if b.startswith("torch")]
    assert ">=2.10" in torch_range and "<2.16" in torch_range           # the versions the matrix ran (noxfile.py)


@pytest.mark.slow
def test_the_wheel_works_outside_the_source_tree(installed):
    site, _, work, env = installed
    code = ("import einc, torch\n"
            "a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)\n"
            "out = einc.einsum('ij,jk,kl->il', a, b, c)\n"
            "torch.testing.assert_close(out, torch.einsum('ij,jk,kl->il', a, b, c))\n"
            "print(einc.__file__)\n")
    done = _run([sys.executable, "-c", code], cwd=work, env=env)
    assert done.stdout.strip() == str(site / "einc" / "__init__.py")          # the wheel's einc, not the checkout's

    einc_cmd = [str(site / "bin" / "einc")]                                  # the console script of the wheel
    done = _run([*einc_cmd, "explain", "ij,jk,kl->il", "--shapes", "64x8,8x64,64x8"], cwd=work, env=env)
    assert "Complete contraction:  ij,jk,kl->il" in done.stdout and "torch.einsum default" in done.stdout

    done = _run([*einc_cmd, "dump", "--suite", "-o", str(work / "kernels")], cwd=work, env=env)
    assert str(site / "einc" / "tools" / "benchmark" / "suite.json") in done.stdout
    def tree(root):
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.suffix in (".py", ".txt")}
    assert tree(work / "kernels") == tree(ROOT / "kernels")          # the committed golden kernels

    done = _run([*einc_cmd, "bench", "--quick", "--rounds", "3", "--budget", "0.1", "--filter", "tiny_gemm",
                 "--no-chart"], cwd=work, env=env)
    results = list((work / "einc-bench").glob("suite_cpu*.csv"))     # the default --out for the packaged suite
    assert len(results) == 1 and "tiny_gemm_16" in results[0].read_text()
    assert "tiny_gemm_16" in done.stdout
