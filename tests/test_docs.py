"""The docs tell the truth about the code, where a machine can check it cheaply: links and
anchors resolve (titled ones too), the files code blocks name exist, the Python blocks run,
every ``einc`` command line parses, the settings tables name config.py's settings with its
defaults (and every ``EINC_*`` name the code spells), architecture.md names every module of
einc/, bench/README.md every file of bench/ with options its script declares, and README.md
stays a landing page."""

import re
import shlex
from pathlib import Path

import pytest

from einc import config

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md",
         ROOT / "bench" / "gpu.md"]
MARKDOWN = PAGES + sorted((ROOT / "bench" / "measured").rglob("*.md"))
# Blocks that show a pattern of a call, not a program: their names (model, eq, method) are the reader's.
FRAGMENTS = {
    ("README.md", 'model = torch.compile(model, backend="einc")'),
    ("docs/slicing.md", "out = einc.einsum(eq, *tensors, memory_limit=2**20)"),
    ("bench/README.md", "out = method(eq, *ops); torch.autograd.grad(out, float_ops, g)"),
}
_FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, -1, -2 for repeats."""
    found, seen = set(), {}
    for heading in re.findall(r"^#+\s+(.*?)\s*$", _FENCED.sub("", page.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


# An inline link's destination: ``<...>`` or a run without spaces (balanced parentheses
# allowed), then an optional title in quotes or parentheses.
_LINK = re.compile(r"""\]\(\s*(<[^<>\n]*>|[^\s()<>]+(?:\([^\s()]*\)[^\s()<>]*)*)"""
                   r"""(?:\s+(?:"[^"\n]*"|'[^'\n]*'|\([^()\n]*\)))?\s*\)""")
# A repository file a code block names (``python bench/x.py``, ``pytest tests/y.py``), from the
# root or from the page's folder.
_REPO_PATH = re.compile(r"(?<![\w./~$-])((?:\.\./)*[\w-]+(?:/[\w.-]+)+\.(?:md|py|sh|json|toml))\b")


def _links(text: str) -> list[str]:
    """The destinations of the inline links (and images) of ``text``, outside code blocks."""
    return [link.removeprefix("<").removesuffix(">") for link in _LINK.findall(_FENCED.sub("", text))]


def test_links_are_read_with_titles_angle_brackets_and_parentheses():
    text = ('[a](a.md "A title") [b](<b c.md>) [d](d(1).md) ![e](e.png \'E\') [f](f.md#g (G))\n'
            "```\n[h](h.md)\n```\n")
    assert _links(text) == ["a.md", "b c.md", "d(1).md", "e.png", "f.md#g"]


@pytest.mark.parametrize("page", MARKDOWN, ids=_name)
def test_relative_links_and_anchors_resolve(page):
    """Links in code blocks are not links (a reader sees the brackets); the files those
    blocks name are checked by test_files_named_in_code_blocks_exist."""
    broken = []
    for link in _links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no such heading in {_name(target)}")
    assert not broken, broken


@pytest.mark.parametrize("page", MARKDOWN, ids=_name)
def test_files_named_in_code_blocks_exist(page):
    """A command block's ``bench/x.py``, ``tests/y.py`` or ``h200-.../decisions.json`` is a
    file the reader is sent to, as a link is."""
    named = {path for block in _FENCED.findall(page.read_text(encoding="utf-8")) for path in _REPO_PATH.findall(block)}
    missing = [path for path in sorted(named) if not (ROOT / path).exists() and not (page.parent / path).exists()]
    assert not missing, missing


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p, "python")], ids=_name)
def test_python_blocks_run_as_shown(page, tmp_path, monkeypatch):
    """Each page's blocks run in order in one namespace, as a reader pastes them."""
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    namespace: dict = {}
    for block in _blocks(page, "python"):
        if (_name(page), block.splitlines()[0].split("  #")[0].strip()) in FRAGMENTS:
            continue
        exec(compile(block, _name(page), "exec"), namespace)


def test_every_fragment_is_still_on_its_page():
    firsts = {(_name(p), b.splitlines()[0].split("  #")[0].strip()) for p in PAGES for b in _blocks(p, "python")}
    assert firsts >= FRAGMENTS


# The operands of each page's ``>>>`` transcripts, as the page's comments give them.
TRANSCRIPTS = {
    "docs/autograd-and-compile.md": "a, b, c, d = torch.randn(20, 20), torch.randn(20, 20), torch.randn(20, 20), "
                                    "torch.randn(20, 2)",
}


def _transcripts(page: Path) -> list[tuple[str, str]]:
    """Each ``>>> command`` of the page's fenced blocks, with the lines shown after it."""
    found = []
    for block in _FENCED.findall(page.read_text(encoding="utf-8")):
        found += re.findall(r"^>>> (.*)\n((?:(?!>>> |```).*\n)*)", block, re.M)
    return found


def test_transcripts_print_what_they_show(tmp_path, monkeypatch):
    """A ``>>>`` line's output on the page is what the line prints today."""
    import contextlib
    import io
    monkeypatch.setenv("EINC_CACHE_DIR", str(tmp_path))
    pages = {_name(p) for p in PAGES if _transcripts(p)}
    assert pages == set(TRANSCRIPTS), "give the operands of each page's transcripts in TRANSCRIPTS"
    wrong = []
    for name in sorted(pages):
        namespace: dict = {}
        exec("import torch, einc, einc.dynamo\n" + TRANSCRIPTS[name], namespace)
        for command, shown in _transcripts(ROOT / name):
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                exec(command, namespace)
            if printed.getvalue() != shown:
                wrong.append(f"{name}: >>> {command}\nshows:\n{shown}prints:\n{printed.getvalue()}")
    assert not wrong, "\n".join(wrong)


def _command_lines():
    """``einc ...`` lines of the pages' shell blocks, environment assignments and comments left out."""
    for page in PAGES:
        for block in _blocks(page, "sh"):
            for line in block.splitlines():
                words = shlex.split(line, comments=True)
                while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                    words = words[1:]
                if words[:1] == ["einc"]:
                    yield pytest.param(words[1:], id=f"{_name(page)}: {' '.join(words)}")


@pytest.mark.parametrize("args", list(_command_lines()))
def test_einc_command_lines_parse(args):
    from einc.tools.cli import build_parser
    parsed = build_parser().parse_args(args)        # argparse exits 2 on an unknown command or option
    assert parsed.command == args[0]


def _settings_table(page: str) -> dict[str, tuple[str, str]]:
    text = (ROOT / page).read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(EINC_[A-Z_]+)` \| (.*) \| (.*) \|$", text, re.M)
    return {name: (accepts, default) for name, accepts, default in rows}


@pytest.mark.parametrize("page", ["README.md", "docs/usage.md"])
def test_settings_tables_match_config(page):
    table = _settings_table(page)
    documented = set(re.findall(r"^``(EINC_[A-Z_]+)``", config.__doc__, re.M))
    assert set(table) == documented
    defaults = {"EINC_CACHE_SIZE": str(config.DEFAULT_CACHE_SIZE),
                "EINC_CACHE_MAX_MB": str(config.DEFAULT_CACHE_MAX_MB),
                "EINC_SLICE_OVERHEAD": str(config.DEFAULT_SLICE_OVERHEAD), "EINC_BACKEND": f"`{config.BACKENDS[0]}`",
                "EINC_NEW_SHAPES": f"`{config.NEW_SHAPES[0]}`", "EINC_LAYOUT": f"`{config.LAYOUTS[0]}`",
                "EINC_SELECT": f"`{config.SELECT[0]}`"}
    for name, default in defaults.items():
        assert table[name][1].startswith(default), (name, table[name][1])
    for name, choices in (("EINC_BACKEND", config.BACKENDS), ("EINC_NEW_SHAPES", config.NEW_SHAPES),
                          ("EINC_LAYOUT", config.LAYOUTS), ("EINC_SELECT", config.SELECT)):
        named = set(re.findall(r"`([a-z]+)`", table[name][0] + " " + table[name][1])) & set(choices)
        assert named >= set(choices), (name, set(choices) - named)
    no_bound = set(re.findall(r"`([a-z]+)`", table["EINC_SLICE_OVERHEAD"][0]))
    assert no_bound >= set(config.NO_SLICE_BOUND), set(config.NO_SLICE_BOUND) - no_bound


@pytest.mark.parametrize("page", ["README.md", "docs/usage.md"])
def test_settings_tables_give_what_config_reads_where_unset(page, monkeypatch):
    """The defaults test_settings_tables_match_config does not take from a constant: each
    reader's answer with the variable unset, against the table's default column."""
    table = _settings_table(page)
    for name in table:
        monkeypatch.delenv(name, raising=False)
    words = {True: "`on`", False: "off", None: "none"}
    for name, reader in (("EINC_COPY_COMPILE", config.copy_compile), ("EINC_HUGE_PAGES", config.huge_pages),
                         ("EINC_DEBUG", config.debug), ("EINC_RECORD", config.record)):
        assert table[name][1] == words[reader()], (name, table[name][1])
    assert table["EINC_COMPILE_THREADS"][1].endswith(f"at most {config.DEFAULT_COMPILE_THREADS}")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert config.cache_dir() == Path("/xdg/einc")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert config.cache_dir() == Path("~/.cache/einc").expanduser()
    assert table["EINC_CACHE_DIR"][1].startswith("`$XDG_CACHE_HOME/einc`, else `~/.cache/einc`")


def test_the_readme_is_a_landing_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", w) and re.search(r"\d", w)]
    assert not hashes, f"commit hashes in README.md: {hashes}"
    assert not re.findall(r"(?<![\w&])#\d+\b|\bissue \d+", text, re.I), "issue numbers in README.md"


def test_every_example_and_page_is_listed():
    """README.md's examples table names every script in examples/, and both indexes every docs page."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    examples = set(re.findall(r"^\| \[examples/(\w+\.py)\]\(examples/\1\) \|", readme, re.M))
    assert examples == {p.name for p in (ROOT / "examples").glob("*.py")}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert set(re.findall(r"^- \[docs/([\w-]+\.md)\]\(docs/\1\)", readme, re.M)) == pages
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    assert set(re.findall(r"^\| \[([\w-]+\.md)\]\(\1\) \|", index, re.M)) == pages


def test_architecture_names_every_module():
    """docs/architecture.md, the code room by room, names each module of einc/ (as ``name``,
    ``name.py`` or a path ending in it), so a new module is placed in its room."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set()
    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.split("(")[0].strip()
        named.add(token.rsplit("/", 1)[-1].removesuffix(".py"))
    modules = {p.stem for p in (ROOT / "einc").rglob("*.py") if p.stem != "__init__"}
    assert modules <= named, sorted(modules - named)


def _bench_sources(script: str) -> str:
    """A bench script's text with the bench modules it imports and, where it runs einc's own
    harness, einc/tools/: where its options are declared."""
    source = (ROOT / "bench" / script).read_text(encoding="utf-8")
    texts = [source]
    for module in re.findall(r"^\s*from bench\.(\w+) import", source, re.M):
        texts.append((ROOT / "bench" / f"{module}.py").read_text(encoding="utf-8"))
    if "einc.tools" in source:
        texts += [p.read_text(encoding="utf-8") for p in (ROOT / "einc" / "tools").rglob("*.py")]
    return "\n".join(texts)


def _undeclared(script: str, text: str) -> list[str]:
    sources = _bench_sources(script)
    return [f"{script} {flag}" for flag in sorted(set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text)))
            if f'"{flag}"' not in sources]


def test_bench_readme_lists_every_script_once_with_its_options():
    """bench/README.md's table of scripts has one row per file of bench/, and names only
    options the script declares."""
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `bench/([\w.]+)` \|(.*)$", text, re.M)
    files = {p.name for p in (ROOT / "bench").glob("*") if p.suffix in (".py", ".sh")} - {"__init__.py"}
    assert sorted(name for name, _ in rows) == sorted(files)
    wrong = [w for name, row in rows if name.endswith(".py") for w in _undeclared(name, row)]
    assert not wrong, wrong


def test_bench_command_lines_name_scripts_and_options_that_exist():
    """Every ``bench/NAME.py ARGS`` the pages show (after ``python``, ``timeout``, ...): the script
    exists and takes each option."""
    wrong = []
    for page in PAGES:
        for line in page.read_text(encoding="utf-8").splitlines():
            for script, args in re.findall(r"\bbench/(\w+\.py)((?:[ \t]+\[?[\w./,=-]+\]?)*)", line):
                if not (ROOT / "bench" / script).exists():
                    wrong.append(f"{_name(page)}: no bench/{script}")
                else:
                    wrong += [f"{_name(page)}: {w}" for w in _undeclared(script, args)]
    assert not wrong, wrong


def test_every_setting_einc_reads_is_in_the_settings_tables():
    """Every ``EINC_*`` name einc's code spells out is a row of both settings tables: a
    variable read outside config.py, or one config.py's docstring forgot, is caught."""
    spelled = set()
    for path in (ROOT / "einc").rglob("*.py"):
        spelled |= set(re.findall(r"[\"'](EINC_[A-Z][A-Z0-9_]*)[\"']", path.read_text(encoding="utf-8")))
    assert spelled, "no setting found: the pattern no longer matches the code"
    for page in ("README.md", "docs/usage.md"):
        assert spelled <= set(_settings_table(page)), (page, sorted(spelled - set(_settings_table(page))))


def test_the_readme_quotes_figures_only_in_its_performance_table():
    """Timings and ratios live under bench/measured/; README.md's one place for them is the
    Performance section's table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    outside = re.sub(r"^## Performance\n.*?(?=^## )", "", _FENCED.sub("", text), flags=re.S | re.M)
    units = r"(?:ms|µs|us|s|min|minutes?|hours?|x|×|times|epsilons?|%)(?!\w)"
    figures = re.findall(r"\b\d+(?:[.,]\d+)?(?:-\d+(?:\.\d+)?)? ?" + units, outside)
    assert not figures, figures
