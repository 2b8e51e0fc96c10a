"""The package's shape stays readable: imports that run down through the layers, no import cycles, small modules
and functions, a page that starts light."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, run_module

PACKAGE = ROOT / "playground"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# The package's layers, lowest first, each named by what sits right under playground/ (a module or a
# subpackage). A module imports only from its own layer and the layers below it, so the low layers can be read,
# tested and reused without the ones above (the registry without any backend, the models without a backend,
# a backend without the Result). Each strategy's records (its typed pieces of the backends' output and the
# Result) sit lowest, so that the shared types of both can inherit them. The package's own __init__ re-exports
# RunSpec, so it sits in spec's layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "limits", "host", "metrics", "device", "generation_slot", "data", "strategy_records"),
    ("registry",),
    ("constraints",),
    ("spec", "compatibility", "retention", "__init__"),
    ("models",),
    ("backends",),
    ("result", "events"),
    ("runner", "decode_costs", "sampler_lab"),
    ("sweep", "context"),
    ("openai_api",),
    ("ui", "tools"),
    ("__main__",),
)
# The same rule one level down, inside the JAX backend (playground/backends/jax/), lowest first: the model's math,
# the cache layouts over it, the logits chain, the engine (weights, forward, prefill, the program kernel), a kept
# prefix's resume (the prefix store's side on JAX), the plug-in contract and a request's programs, the strategies'
# plug-ins, and the request loop and the backend.
JAX_LAYERS: tuple[tuple[str, ...], ...] = (
    ("model",),
    ("caches",),
    ("chain",),
    ("engine",),
    ("prefix_reuse", "restored_reuse"),
    ("programs", "strategy"),
    ("strategies",),
    ("loop", "decoder", "backend", "teacher_forced", "reuse_vs_cold", "lab", "__init__"),
)
# Two packages of one layer that import neither one the other: the page and the tools share only what sits below
# them (the long-context measure, the sweep, the constraint examples), so either can change without the other.
APART = (("ui", "tools"),)


@functools.cache
def nodes(source: str) -> tuple[ast.AST, ...]:
    """Every node of a module's source (ast.walk's order): most tests below read the whole package, which is
    parsed once for them all."""
    return tuple(ast.walk(ast.parse(source)))


@pytest.fixture(autouse=True, scope="module")
def _package_parsed_once() -> Iterator[None]:
    """The package's nodes are dropped when the file ends: kept, every later garbage collection would scan them."""
    yield
    nodes.cache_clear()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(path: Path, known: set[str]) -> set[str]:
    """Every playground module a file imports, anywhere in it (function level and TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in nodes(path.read_text()):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from playground.x import y` imports playground.x.y when y is a module, else playground.x
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        found.update(n for n in names if n in known)
    return found


def test_the_package_has_no_import_cycle():
    known = modules()
    graph = {name: imported(path, set(known)) - {name} for name, path in known.items()}
    state: dict[str, str] = {}
    cycles: list[list[str]] = []

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append([*trail[trail.index(target):], target] if target in trail else [name, target])
            elif target not in state:
                visit(target, [*trail, target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"


def test_modules_and_functions_stay_small():
    too_long = []
    for name, path in modules().items():
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {len(source.splitlines())} lines")
        for node in nodes(source):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert not too_long


def layer(module: str) -> int | None:
    """The index in LAYERS of a playground module; None for one no layer names."""
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    return next((index for index, names in enumerate(LAYERS) if head in names), None)


def upward_imports() -> list[str]:
    """Every import (module level, function level or for type checking alone) of a module in a higher layer."""
    known = modules()
    found = []
    for name, path in sorted(known.items()):
        mine = layer(name)
        for target in sorted(imported(path, set(known))):
            theirs = layer(target)
            if mine is not None and theirs is not None and theirs > mine:  # an unplaced module: the test below
                found.append(f"{name} -> {target}")
    return found


def test_every_module_sits_in_a_layer():
    """A new module or subpackage right under playground/ is placed in LAYERS (the layer says what it may use)."""
    assert [name for name in modules() if layer(name) is None] == []


def test_imports_run_down_through_the_layers():
    assert upward_imports() == []


def jax_layer(module: str) -> int | None:
    """The index in JAX_LAYERS of a module of the JAX backend; None for any other module."""
    parts = module.split(".")
    if parts[:3] != ["playground", "backends", "jax"]:
        return None
    head = parts[3] if len(parts) > 3 else "__init__"
    return next((index for index, names in enumerate(JAX_LAYERS) if head in names), None)


def test_the_jax_backends_imports_run_down_through_its_layers():
    known = modules()
    jax_modules = [name for name in known if jax_layer(name) is not None or name.startswith("playground.backends.jax")]
    assert [name for name in jax_modules if jax_layer(name) is None] == []  # a new part of it is placed first
    upward = []
    for name in sorted(jax_modules):
        mine = jax_layer(name)
        upward += [f"{name} -> {target}" for target in sorted(imported(known[name], set(known)))
                   if mine is not None and (jax_layer(target) or 0) > mine]
    assert upward == []


def test_neither_backend_imports_the_other():
    """What both backends share (refusals, RoPE frequencies, DRY's breakers, the beam tree, the Backend protocol)
    lives in backend-free modules right under playground/backends/, which import neither backend."""
    known = modules()
    sides = {"torch": "playground.backends.torch", "jax": "playground.backends.jax"}

    def side(module: str) -> str:
        return next((name for name, prefix in sides.items() if module.startswith(prefix)), "shared")

    crossing = [f"{name} -> {target}" for name, path in sorted(known.items()) if name.startswith("playground.backends.")
                for target in sorted(imported(path, set(known)))
                if side(target) != "shared" and side(target) != side(name)]
    assert crossing == []


def test_the_page_and_the_tools_import_neither_one_the_other():
    known = modules()
    def head(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    crossing = [f"{name} -> {target}" for name, path in sorted(known.items())
                for target in sorted(imported(path, set(known)))
                if any({head(name), head(target)} == set(pair) for pair in APART)]
    assert crossing == []


def test_the_layer_rule_sees_an_upward_import(tmp_path, monkeypatch):
    """The check reads function-level imports too, and not the registry's `lazy("module", ...)` strings."""
    low = tmp_path / "playground" / "errors.py"
    low.parent.mkdir()
    low.write_text("def f():\n    from playground.runner import run\n\nLATER = lazy('playground.ui.page', 'x')\n")
    (tmp_path / "playground" / "runner.py").write_text("")
    (tmp_path / "playground" / "ui").mkdir()
    (tmp_path / "playground" / "ui" / "page.py").write_text("")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path / "playground")
    assert upward_imports() == ["playground.errors -> playground.runner"]


@pytest.mark.subprocess
def test_the_page_starts_without_torch_or_jax():
    out = run_module("page_imports", timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# where cache and strategy names may be written out: the registry's own entries, the presets (data), the tools and
# the long-context measure they share with the page (which times greedy runs)
NAMES_ALLOWED_IN = ("playground/registry/", "playground/tools/", "playground/context/", "playground/ui/presets.py")


def _strings(node: ast.expr) -> set[str]:
    """The string constants a comparison's operand spells out (one, or a tuple, list or set of them)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}


def _field(node: ast.expr) -> str | None:
    """`spec.cache`, `strategy`, `entry.strategy.name`... the cache or strategy a comparison's operand reads."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        node = node.value
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    return name if name in ("cache", "strategy", "cache_name", "strategy_name") else None


def test_no_cache_or_strategy_is_told_apart_by_its_name_outside_the_registry():
    """A new cache type or strategy is one registry entry: code elsewhere asks an entry what it can do
    (`registry.strategy(name).drafts`), never compares the name with one it knows."""
    from playground import registry

    names = set(registry.cache_names()) | set(registry.strategy_names())
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(NAMES_ALLOWED_IN):
            continue
        for node in nodes(path.read_text()):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(_field(o) for o in operands) and any(_strings(o) & names for o in operands):
                    found.append(f"{relative}:{node.lineno}")
            elif isinstance(node, ast.Call):  # RunSpec(cache="static"): a name chosen where a capability was meant
                if any(k.arg and _field(ast.Name(k.arg)) and _strings(k.value) & names for k in node.keywords):
                    found.append(f"{relative}:{node.lineno}")
    assert found == []


# Modules a strategy owns beside those its registry entry names (plug-ins, records' builders, view): the comparison
# of finished hypotheses across beam columns, drawn under the beam views, and assisted decoding's bench
OWNED_BESIDES = {"playground/ui/beam_compare.py": ("beam", "beam_sample", "diverse_beam"),
                 "playground/tools/bench_assisted.py": ("assisted",)}


def _reads(node: ast.AST) -> str | None:
    """The key a node reads by name: `x["key"]`, `x.get("key")` or `"key" in x`; None for anything else."""
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key = node.args[0]
    elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
        key = node.left
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _pieces() -> tuple[dict[str, str], dict[str, str]]:
    """The fields each strategy's records module declares for the shared types (`strategy_records.composite`),
    -> the module that declares them: (keys read by subscript: the backends' TokenInfo keys; attributes: the
    backends' output fields). The metrics are left out: the comparison table shows every metric by its key."""
    import dataclasses

    from playground.strategy_records import composite

    def module_path(piece: type) -> str:
        return piece.__module__.replace(".", "/") + ".py"

    joined = set(composite.StrategyTokenInfo.__annotations__)
    pieces = [p for p in vars(composite).values() if isinstance(p, type) and p.__module__ != composite.__name__]
    keys = {name: module_path(piece) for piece in pieces if hasattr(piece, "__total__")
            and set(piece.__annotations__) <= joined for name in piece.__annotations__}
    attributes = {field.name: module_path(piece) for piece in composite.StrategyOutputs.__bases__
                  for field in dataclasses.fields(piece)}
    return keys, attributes


def _attribute(node: ast.AST) -> str | None:
    """The attribute a node reads or writes: `output.beam_tree`; None for anything else."""
    return node.attr if isinstance(node, ast.Attribute) else None


def _owners() -> dict[str, set[str]]:
    """Module path -> the strategies whose entry names code in it (by `lazy("module", ...)`), or OWNED_BESIDES."""
    from playground import registry

    owners: dict[str, set[str]] = {path: set(names) for path, names in OWNED_BESIDES.items()}
    for entry in registry.strategies():
        named = [*entry.impl.values(), entry.view, entry.check_model, entry.validate,
                 *(r.build for r in (*entry.token_records, *entry.run_records))]
        for function in named:
            module = getattr(function, "__qualname__", "").rpartition(".")[0]
            if module.startswith("playground."):
                owners.setdefault(module.replace(".", "/") + ".py", set()).add(entry.name)
    return owners


def test_no_shared_module_reads_a_strategys_records_by_name():
    """A strategy's records (`tokens[i].contrastive`, `beam_tree`, ...) and what its backends record for them (a
    token's `candidates`, an output's `.beam_tree`) are read by its own code: its plug-ins, its records' module
    and builders, and its view. A module every strategy shares (the Result, the token view, step mode, the column
    card) asks the column's view or the records' composite instead, so a new strategy needs no line there."""
    from playground import registry

    owners = _owners()
    keys: dict[str, set[str]] = {}
    for entry in registry.strategies():
        for record in (*entry.token_records, *entry.run_records):
            keys.setdefault(record.key, set()).add(entry.name)
    info_keys, attributes = _pieces()
    for name, module in info_keys.items():
        keys.setdefault(name, set()).update(owners.get(module, set()))
    fields = {name: owners.get(module, set()) for name, module in attributes.items()}
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("playground/registry/"):
            continue
        mine = owners.get(relative, set())
        for node in nodes(path.read_text()):
            key, attribute = _reads(node), _attribute(node)
            if key in keys and not keys[key] & mine:
                found.append(f"{relative}:{node.lineno} reads {key!r}")
            if attribute in fields and not fields[attribute] & mine:
                found.append(f"{relative}:{node.lineno} reads .{attribute}")
    assert not found, "\n".join(found)


def test_the_record_key_rule_sees_a_shared_read(tmp_path, monkeypatch):
    (tmp_path / "playground" / "ui").mkdir(parents=True)
    (tmp_path / "playground" / "ui" / "step_view.py").write_text('def line(record):\n    return record.get("dola")\n')
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path / "playground")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="step_view.py:2 reads 'dola'"):
        test_no_shared_module_reads_a_strategys_records_by_name()


def test_the_record_key_rule_sees_a_backend_record_read_by_name(tmp_path, monkeypatch):
    """What a backend records for one strategy counts too: a token's `candidates`, an output's `.beam_tree`."""
    (tmp_path / "playground" / "backends").mkdir(parents=True)
    (tmp_path / "playground" / "backends" / "shared.py").write_text(
        'def tree(output, info):\n    return output.beam_tree, info["candidates"]\n')
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path / "playground")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=r"shared.py:2 reads \.beam_tree.*shared.py:2 reads 'candidates'"):
        test_no_shared_module_reads_a_strategys_records_by_name()


def test_the_jax_programs_are_keyed_by_the_registrys_strategy_names():
    """A strategy's compiled programs carry its registry name (`Kernel(name=...)`), so the program cache reads as
    the registry does."""
    from playground import registry

    names = set()
    for path in (PACKAGE / "backends" / "jax").rglob("*.py"):
        for node in nodes(path.read_text()):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Kernel":
                value = next(k.value for k in node.keywords if k.arg == "name")
                names |= {n.value for n in ast.walk(value) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert names and names <= set(registry.strategy_names()), names - set(registry.strategy_names())


def test_the_suites_heaviest_files_exist():
    """The order the test workers take files in names files that are there (a renamed one would go unranked)."""
    from tests.conftest import HEAVIEST_FAST_FILES, HEAVIEST_FILES

    for order in (HEAVIEST_FILES, HEAVIEST_FAST_FILES):
        assert len(set(order)) == len(order)
        assert [path for path in order if not (ROOT / path).is_file()] == []
