"""The package's layout is a contract (shared/DESIGN.md): data flows one way through the stages, commands are thin
and never import each other, test gear stays out of the stages, and no module grows past a readable size."""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tfbertperf"

# Lower rank = lower stage.  A module may import its own rank or lower, never higher.
BASE = 0  # config, errors, redact: used by every stage
STAGES = {"storage": 1, "data": 2, "model": 3, "train": 4, "profile": 5, "envinfo": 6, "report": 7}
COMPOSITION = 8  # job.py (and regime.py, its accelerator-regime part) composes the stages; cliargs.py and keras.py are shared by commands / users
COMMANDS = {"run", "prepare", "compare", "analyze", "env", "tokenize", "cli", "__main__"}
COMMAND = 9
TESTING = 10  # test and demo gear: may use anything, nothing in the product uses it
BASE_MODULES = {"config", "errors", "redact", "__init__"}


def _rank(module: str) -> int:
    """Rank of a dotted module name inside tfbertperf ("tfbertperf.profile.capture" → 5)."""
    parts = module.split(".")
    assert parts[0] == "tfbertperf", module
    head = parts[1] if len(parts) > 1 else "__init__"
    if head in STAGES:
        return STAGES[head]
    if head == "testing":
        return TESTING
    if head in COMMANDS:
        return COMMAND
    if head in BASE_MODULES:
        return BASE
    if head in ("job", "regime", "cliargs", "keras"):
        return COMPOSITION
    raise AssertionError(f"{module}: not placed in a stage; add it to tests/test_layout.py's table")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts)


def _is_module(name: str) -> bool:
    return (PKG / f"{name}.py").is_file() or (PKG / name / "__init__.py").is_file()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported tfbertperf module) for every import in the file, lazy ones inside functions included."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_name(path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "tfbertperf"]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative import
                base = me.split(".")[: -node.level] if path.name != "__init__.py" else me.split(".")[: len(me.split(".")) - node.level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            if mod.split(".")[0] != "tfbertperf":
                continue
            if mod == "tfbertperf":  # `from tfbertperf import job` imports tfbertperf.job; `__version__` is a name
                out += [(node.lineno, f"tfbertperf.{a.name}" if _is_module(a.name) else "tfbertperf")
                        for a in node.names]
            else:
                out.append((node.lineno, mod))
    return out


def _edges():
    for path in sorted(PKG.rglob("*.py")):
        src = _module_name(path)
        for line, dst in _imports(path):
            yield path, line, src, dst


def test_no_stage_imports_a_higher_stage_and_no_command_imports_another():
    bad = []
    for path, line, src, dst in _edges():
        rs, rd = _rank(src), _rank(dst)
        head_s, head_d = src.split(".")[1] if "." in src else "", dst.split(".")[1] if "." in dst else ""
        if rs == COMMAND and rd == COMMAND and head_s != head_d and head_s not in ("cli", "__main__"):
            bad.append(f"{path.relative_to(ROOT)}:{line}: command {src} imports command {dst}")
        elif rd > rs and not (rs == COMMAND and rd == COMMAND):
            bad.append(f"{path.relative_to(ROOT)}:{line}: {src} (rank {rs}) imports higher {dst} (rank {rd})")
    assert not bad, "\n".join(bad)


def test_the_import_check_sees_lazy_imports_and_would_flag_a_backwards_edge(tmp_path):
    # The walker must see imports inside functions (most of ours are lazy), or the check above proves nothing.
    loop = PKG / "train" / "loop.py"
    found = {dst for _, dst in _imports(loop)}
    assert "tfbertperf.model" in found  # imported inside train(), not at the top
    assert _rank("tfbertperf.train.loop") < _rank("tfbertperf.profile.capture")
    assert _rank("tfbertperf.storage.base") < _rank("tfbertperf.testing.proxy")


def test_cli_dispatches_only_to_known_commands():
    from tfbertperf.cli import COMMANDS as dispatched

    assert set(dispatched) <= COMMANDS
    for name in dispatched:
        assert (PKG / f"{name}.py").is_file(), name


def test_every_module_stays_under_350_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    big = {k: v for k, v in sizes.items() if v >= 350}
    assert not big, big


def _schema_block(text: str) -> str:
    m = re.search(r"# report\.json[^\n]*\n```jsonc\n(.*?)```", text, re.S)
    assert m, "no report.json schema block"
    return m.group(1)


def test_report_schema_in_the_package_matches_the_design_document():
    design = ROOT.parent / "shared" / "DESIGN.md"
    if not design.is_file():
        pytest.skip("shared/DESIGN.md is not beside this checkout")
    ours = _schema_block((PKG / "report" / "SCHEMA.md").read_text())
    theirs = _schema_block(design.read_text().replace("## report.json", "# report.json"))
    assert ours == theirs


def schema_keys() -> dict[str, set[str]]:
    """Top-level keys of report.json and of its object-valued sections, read from tfbertperf/report/SCHEMA.md."""
    block = _schema_block((PKG / "report" / "SCHEMA.md").read_text())
    text = re.sub(r"//[^\n]*", "", block).replace("…", "")
    text = re.sub(r'"[^"]*"\s*:', lambda m: m.group(0), text)
    depth, keys, current, sections = 0, set(), None, {}
    for m in re.finditer(r'"([a-z_0-9]+)"\s*:|[{}]', text):
        tok = m.group(0)
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
        elif depth == 1:
            keys.add(m.group(1))
            current = m.group(1)
            sections.setdefault(current, set())
        elif depth == 2 and current:
            sections[current].add(m.group(1))
    sections[""] = keys
    return sections


def test_schema_reader_finds_the_contract_keys():
    keys = schema_keys()
    assert {"schema", "attribution", "verdict", "storage", "throughput"} <= keys[""]
    assert {"breakdown_ms", "fractions", "input_cost_fraction"} <= keys["attribution"]
    json.dumps(sorted(keys[""]))
