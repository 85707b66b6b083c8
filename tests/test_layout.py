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
# Composition, in three ranks so that no circle among them hides under one rank: compose/ holds the parts a run is
# made of (training, host sampling, input ceiling, the regime's report keys); job.py composes them into a run;
# accelerator_search.py and advice_validation.py run job.py several times.  cliargs.py, keras.py, keras_jax.py,
# jax_steps.py, jax_probe.py and tf_steps.py: shared by commands / users, importing only the stages.
PARTS = 8
PARTS_MODULES = {"compose", "cliargs", "keras", "keras_jax", "jax_steps", "jax_probe", "tf_steps"}
JOB = 9
JOB_USERS = 10
JOB_USER_MODULES = {"accelerator_search", "advice_validation"}
COMMANDS = {"run", "prepare", "compare", "analyze", "env", "tokenize", "cli", "__main__"}
COMMAND = 11
TESTING = 12  # test and demo gear: may use anything, nothing in the product uses it
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
    if head in PARTS_MODULES:
        return PARTS
    if head == "job":
        return JOB
    if head in JOB_USER_MODULES:
        return JOB_USERS
    raise AssertionError(f"{module}: not placed in a stage; add it to tests/test_layout.py's table")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts)


def _is_module(dotted: str) -> bool:
    """Whether the dotted name (tfbertperf.x.y) is a module or package of this tree."""
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    return (PKG / rel).with_suffix(".py").is_file() or (PKG / rel / "__init__.py").is_file()


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (annotations only: never run, so no circle)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported tfbertperf module) for every import in the file, lazy ones inside functions included;
    `from tfbertperf.data import pretrain` is the module tfbertperf.data.pretrain, not the package."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_name(path)
    skip = _type_checking_only(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "tfbertperf"]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative import
                base = me.split(".")[: -node.level] if path.name != "__init__.py" else me.split(".")[: len(me.split(".")) - node.level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            if mod.split(".")[0] != "tfbertperf":
                continue
            # `from pkg import name`: the submodule pkg.name where there is one (`__version__`, a function: pkg)
            out += [(node.lineno, f"{mod}.{a.name}" if _is_module(f"{mod}.{a.name}") else mod) for a in node.names]
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
    assert _rank("tfbertperf.compose.training") < _rank("tfbertperf.job") < _rank("tfbertperf.accelerator_search")


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import graph's circles: each strongly connected component of more than one module (or a module that
    imports itself), as a sorted list of module names (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1 or node in edges.get(node, ()):
                    out.append(sorted(comp))
    return sorted(out)


def _import_graph() -> dict[str, set[str]]:
    """module → the tfbertperf modules it imports (a package's __init__ counts as the package's name)."""
    graph: dict[str, set[str]] = {}
    for _, _, src, dst in _edges():
        src = src.removesuffix(".__init__")
        if dst != src:
            graph.setdefault(src, set()).add(dst)
    return graph


def test_no_import_circles_lazy_imports_included():
    circles = _cycles(_import_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle_and_reads_from_pkg_import_module():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    # profile/utilization.py: `from tfbertperf.profile import threadcpu` is an edge to the module, not the package
    found = {dst for _, dst in _imports(PKG / "profile" / "utilization.py")}
    assert "tfbertperf.profile.threadcpu" in found and "tfbertperf.profile" not in found


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
