"""The ``torch_dynamo_backends`` entry point declared in pyproject.toml loads cheaply and
names a working backend.  Each check runs in a fresh interpreter; a temporary
``.dist-info`` carries the declared entry point, so the test also works in a checkout
that was not pip-installed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> str:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["project"]["entry-points"]["torch_dynamo_backends"]["einc"]


@pytest.fixture
def env(tmp_path):
    dist = tmp_path / "einc_entry_point_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: einc-entry-point-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[torch_dynamo_backends]\neinc = {_declared()}\n")
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), e.get("PYTHONPATH", "")])
    return e


def _run(code, env):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_entry_point_loads_without_triton_or_inductor(env):
    assert _declared() == "einc.dynamo:backend"
    out = _run(
        "import importlib.metadata as md, sys\n"
        "eps = [ep for ep in md.entry_points(group='torch_dynamo_backends') if ep.name == 'einc']\n"
        "assert eps, 'no einc entry point'\n"
        "fns = {ep.load() for ep in eps}\n"
        "import einc.dynamo\n"
        "assert fns == {einc.dynamo.backend}, fns\n"
        "print([m for m in ('triton', 'torch._inductor', 'torch._dynamo') if m in sys.modules])\n", env)
    assert out.strip() == "[]"


def test_backend_by_name_in_fresh_process(env):
    out = _run(
        "import torch\n"
        "assert 'einc' in torch._dynamo.list_backends()\n"
        "import einc.dynamo\n"
        "a, b, c = torch.randn(5, 2), torch.randn(2, 5), torch.randn(5, 2)\n"
        "f = torch.compile(lambda a, b, c: a @ b @ c, backend='einc', options={'inner': 'eager'})\n"
        "torch.testing.assert_close(f(a, b, c), a @ b @ c)\n"
        "print(einc.dynamo.last_report.rewrites[0].equation)\n", env)
    assert out.strip() == "ab,bc,cd->ad"
