"""The parse, graph and plan stages import neither torch nor triton."""

import subprocess
import sys


def test_pure_stages_do_not_import_torch_or_triton():
    code = (
        "import sys, importlib.util, pathlib\n"
        "import einc.equation, einc.graph, einc.plan, einc.errors, einc.config\n"
        "bad = [m for m in ('torch', 'triton') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "from einc.equation import parse\n"
        "from einc.graph import build\n"
        "from einc.plan import build_plan\n"
        "print(build_plan(build(parse('ij,jk,kl->il'), [(2, 3), (3, 4), (4, 5)])).flops)\n"
        "assert 'torch' not in sys.modules\n"
    )
    # Import the submodules without running einc/__init__.
    env_code = (
        "import sys, types, importlib.util, pathlib\n"
        "spec = importlib.util.find_spec('einc')\n"
        "pkg = types.ModuleType('einc'); pkg.__path__ = list(spec.submodule_search_locations)\n"
        "sys.modules['einc'] = pkg\n" + code
    )
    out = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) > 0
