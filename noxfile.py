"""The version matrix: einc's full test suite on each supported torch/triton pair.

    nox -s tests                        # every pair (large downloads: see docs/testing.md, "The version matrix")
    nox -s "tests(torch2.11.0-triton3.6.0)"   # one pair (nox -l lists them)
    nox -s ptx                          # bench/ptx_report.py with each triton, in the virtualenvs tests left
    nox -s matrix_table                 # bench/measured/versions.md's table, from the results the runs left

Each session makes its own virtualenv, installs torch and triton pinned, then einc with
its test extra under a constraints file (so pip cannot move torch or triton), prints the
versions it got, and runs ``python -m pytest -q`` (the suite sets ``TRITON_INTERPRET=1``
itself without a GPU, so the kernel tests run in Triton's interpreter) with a JUnit
report; from that it writes ``.nox/matrix/<pair>.json`` (counts, seconds, date) and
fails unless the sm_90 compile test (``tests/codegen/test_kernel_compile.py``) passed, not
merely skipped.  ``nox -s ptx`` then runs ``bench/ptx_report.py`` (the static kernel
report) with each triton of the matrix, in those virtualenvs.

Set ``EINC_WHEELHOUSE`` to a folder filled once with ``pip download torch==X
triton==Y -d FOLDER`` to install from it (``--find-links``) instead of downloading
again. Arguments after ``--`` go to pytest.
"""

import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / ".nox" / "matrix"

# (torch, triton): each torch with the triton its CUDA wheel pins, and 2.13.0's CPU build
# (what CI and the README's commands install), which pins no triton, with the newest, as
# `pip install ".[test]"` gets it.  A +cpu build comes from PyTorch's CPU index (added
# below) or from EINC_WHEELHOUSE.
PAIRS = [
    ("2.10.0", "3.6.0"),      # a CUDA 12.8 build (the others: 13.x)
    ("2.11.0", "3.6.0"),
    ("2.12.1", "3.7.1"),
    ("2.13.0+cpu", "3.9.0"),
    ("2.14.1", "3.8.0"),
    ("2.15.0", "3.9.0"),
]

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False


CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _pip_args(torch: str) -> list[str]:
    wheelhouse = os.environ.get("EINC_WHEELHOUSE")
    if wheelhouse:
        return ["--find-links", wheelhouse]
    return ["--extra-index-url", CPU_INDEX] if torch.endswith("+cpu") else []


def _summary(junit: Path) -> dict:
    """Counts from pytest's JUnit report, and whether the sm_90 compile test passed."""
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    tests, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    compile_passed = False
    for case in suite.iter("testcase"):
        if case.get("name") == "test_kernels_compile_for_hopper":
            compile_passed = not any(child.tag in ("failure", "error", "skipped") for child in case)
    return {"passed": tests - failures - errors - skipped, "failed": failures, "errors": errors,
            "skipped": skipped, "sm90_compile_test_passed": compile_passed}


@nox.session
@nox.parametrize("torch,triton", PAIRS, ids=[f"torch{t.split('+')[0]}-triton{tr}" for t, tr in PAIRS])
def tests(session: nox.Session, torch: str, triton: str) -> None:
    tmp = Path(session.create_tmp())
    constraints = tmp / "constraints.txt"
    constraints.write_text(f"torch=={torch}\ntriton=={triton}\n")
    session.install(*_pip_args(torch), f"torch=={torch}", f"triton=={triton}")
    session.install(*_pip_args(torch), "-c", str(constraints), "-e", ".[test]")
    got = session.run("python", "-c", "import torch, triton; print(torch.__version__, triton.__version__)",
                      silent=True)
    if got is None:     # --install-only: nothing is run, the virtualenv is ready
        return
    got = got.split()
    session.log(f"torch {got[0]}, triton {got[1]}")
    if got[0] != torch and got[0].split("+")[0] != torch or got[1] != triton:
        session.error(f"asked for torch {torch} with triton {triton}, got {got}")

    junit = tmp / "junit.xml"
    start = time.monotonic()
    session.run("python", "-m", "pytest", "-q", f"--junitxml={junit}", *session.posargs, success_codes=[0, 1])
    seconds = time.monotonic() - start
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"torch": got[0], "triton": got[1], "seconds": round(seconds), "commit": commit,
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "pytest_args": session.posargs, **_summary(junit)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"torch{torch.split('+')[0]}-triton{triton}.json").write_text(json.dumps(result, indent=1) + "\n")
    session.log(json.dumps(result))
    if result["failed"] or result["errors"]:
        session.error(f"{result['failed']} failed, {result['errors']} errors")
    if not session.posargs and not result["sm90_compile_test_passed"]:
        session.error("the sm_90 compile test did not pass (skipped?)")


@nox.session(python=False)
def ptx(session: nox.Session) -> None:
    """bench/ptx_report.py with each triton of the matrix, in the virtualenvs ``tests`` left
    (run ``nox -s tests`` first): ``.nox/matrix/ptx-triton<version>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    done = set()
    for torch, triton in PAIRS:
        python = ROOT / ".nox" / f"tests-torch{torch.split('+')[0]}-triton{triton}".replace(".", "-") / "bin" / "python"
        if triton in done or not python.exists():
            continue
        session.run(str(python), "bench/ptx_report.py", "--json", str(RESULTS / f"ptx-triton{triton}.json"),
                    *session.posargs, external=True)
        done.add(triton)
    if not done:
        session.error("no matrix virtualenv found: run nox -s tests first")


@nox.session(python=False)
def matrix_table(session: nox.Session) -> None:
    """Print the matrix table (bench/measured/versions.md) from the results in .nox/matrix/."""
    rows = []
    for path in sorted(RESULTS.glob("torch*.json")):
        r = json.loads(path.read_text())
        compile_ok = "passed" if r["sm90_compile_test_passed"] else "NOT passed"
        rows.append(f"| {r['torch']} | {r['triton']} | {r['passed']} | {r['failed'] + r['errors']} | "
                    f"{r['skipped']} | {compile_ok} | {r['seconds']} s | {r['date']} | {r.get('commit', '?')} |")
    print("| torch | triton | passed | failed | skipped | sm_90 compile test | time | date | git |")
    print("|---|---|---:|---:|---:|---|---:|---|---|")
    print("\n".join(rows))
