"""Who may import whom (docs/architecture.md), read from the source: every import statement in
hyrl/, at module level or inside a function, resolved to the module it names. A rule broken by
a new import fails here with the importing file and line."""

import ast
import functools
from pathlib import Path

import pytest
from testpaths import HELPERS, ROOT

PACKAGE = ROOT / "hyrl"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _typing_only_lines(tree: ast.Module) -> set[int]:
    """The lines of `if TYPE_CHECKING:` bodies: imports there are read by type checkers only,
    never run."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _function_lines(tree: ast.Module) -> set[int]:
    """The lines of function bodies: imports there run when the function is called, not when
    its module is imported."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(
    with_typing_only: bool = True, in_functions: bool = True
) -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import in hyrl/ (those under
    `if TYPE_CHECKING:` only when with_typing_only, those in function bodies only when
    in_functions)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        skip = set() if with_typing_only else _typing_only_lines(tree)
        if not in_functions:
            skip |= _function_lines(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                found += [(importer, alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the importer's package
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, node.module] if node.module else base)
                else:
                    target = node.module or ""
                found.append((importer, target, node.lineno))
                # `from hyrl.x import y` may name a submodule y: count hyrl.x.y too
                found += [(importer, f"{target}.{alias.name}", node.lineno) for alias in node.names]
    return found


IMPORTS = _imports()


@functools.cache
def _imports_at_import() -> list[tuple[str, str, int]]:
    """The imports that run when their module is imported (none in a function body)."""
    return _imports(in_functions=False)


MODULES = {_module_name(path) for path in PACKAGE.rglob("*.py")}


def _module_graph(imports: list[tuple[str, str, int]]) -> dict[str, set[str]]:
    """hyrl module -> the hyrl modules it imports (a package counts as its __init__)."""
    graph: dict[str, set[str]] = {}
    for src, dst, _ in imports:
        if dst in MODULES and dst != src:
            graph.setdefault(src, set()).add(dst)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: its strongly connected components of more than one
    module (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _violations(
    importers: tuple[str, ...], forbidden: tuple[str, ...], allowed_importers: tuple[str, ...] = ()
) -> list[str]:
    return [
        f"{src} (line {line}) imports {dst}"
        for src, dst, line in IMPORTS
        if _within(src, importers)
        and not _within(src, allowed_importers)
        and _within(dst, forbidden)
    ]


LOOP = ("hyrl.train.cli", "hyrl.train.trainer")
RULES = {
    # algorithms are pure functions on tensors: no I/O layers, no distributed calls
    "algorithms import no backend, engine, loop or distributed code": (
        ("hyrl.algorithms",),
        (
            "hyrl.backends",
            "hyrl.rollout",
            *LOOP,
            "hyrl.cli",
            "torch.distributed",
            "megatron",
            "sglang",
            "ray",
        ),
    ),
    "the loop imports no megatron, SGLang, CPU compatibility or backend internals": (
        LOOP,
        (
            "megatron",
            "sglang",
            "hyrl.backends.megatron",
            "hyrl.rollout.sglang",
            "torch.distributed",
        ),
    ),
    "config is standard library only (a login node imports it)": (
        ("hyrl.config",),
        (
            "hyrl.rollout",
            "torch",
            "megatron",
            "sglang",
            "ray",
            "hyrl.backends",
            *LOOP,
            "hyrl.data",
            "hyrl.models",
            "hyrl.rewards",
            "hyrl.batchsize",
        ),
    ),
    # the loop hands the records' builders plain values (hyrl.metrics.step_record)
    "metrics import no loop, backend or engine": (
        ("hyrl.metrics",),
        ("hyrl.train", "hyrl.backends", "hyrl.rollout", "hyrl.cli"),
    ),
    "the analysis reads run directories only": (
        ("hyrl.batchsize",),
        (
            "torch",
            "megatron",
            "sglang",
            "hyrl.backends",
            "hyrl.train",  # the loop and its autopilot controller: the analysis shares goodput
            "hyrl.rollout.sglang",
            "hyrl.rollout.manager",
            "hyrl.rollout.fleet",
            "hyrl.rollout.build",
        ),
    ),
    # tune's model is formulas on what was measured; the runs that measure are tune's other modules
    "tune's model starts no run: no subprocess, sweep, recipe or other tune module": (
        ("hyrl.batchsize.tune.model",),
        (
            "subprocess",
            "hyrl.batchsize.sweep",
            "hyrl.config.recipe_dry_run",
            "hyrl.batchsize.tune",
        ),
    ),
    # the engines know nothing of the trainer, not even its TrainBackend protocol: the trainer
    # and the engines meet in hyrl.weight_sync only
    "rollout imports nothing of backends": (("hyrl.rollout",), ("hyrl.backends",)),
    "backends do not import rollout": (("hyrl.backends",), ("hyrl.rollout",)),
    "the engines and the trainer backends do not import the weight sync that joins them": (
        ("hyrl.rollout", "hyrl.backends"),
        ("hyrl.weight_sync",),
    ),
    # a mode reaches the trainer through TrainBackend and an engine through RolloutEngine
    "weight sync imports no backend internals, engine package or loop": (
        ("hyrl.weight_sync",),
        (
            "hyrl.backends.megatron",
            "hyrl.backends.factory",
            "hyrl.rollout.sglang",
            "megatron",
            "sglang",
            *LOOP,
        ),
    ),
    "nothing imports upward into the command line or the loop": (
        ("hyrl",),
        ("hyrl.cli", *LOOP),
        ("hyrl.cli", "hyrl.__main__", *LOOP),
    ),
    # the backend imports the checkpoint format, never the other way (`hyrl convert`, the
    # megatron conversions' command, is the backend's: hyrl.backends.megatron.convert_cli)
    "checkpoint is backend-neutral: it imports no backend": (
        ("hyrl.checkpoint",),
        ("hyrl.backends",),
        (),
    ),
    "cpu_compat is megatron's CPU shim, used by the megatron backend only": (
        ("hyrl",),
        ("hyrl.backends.megatron.cpu_compat",),
        ("hyrl.backends.megatron",),
    ),
    # the one door into an engine's package: its preflight, serializer and engines go through it
    "only the engine factory imports the SGLang engine package": (
        ("hyrl",),
        ("hyrl.rollout.sglang",),
        ("hyrl.rollout.sglang", "hyrl.rollout.build"),
    ),
    "SGLang is imported only by the SGLang engine package": (
        ("hyrl",),
        ("sglang",),
        ("hyrl.rollout.sglang",),
    ),
    # study tooling above the runtime: it measures the engines, no run needs it (hyrl.cli names
    # its command as a string and imports it only when it runs)
    "nothing of the runtime imports the profiler": (
        ("hyrl",),
        ("hyrl.profile",),
        ("hyrl.profile",),
    ),
}


def test_the_source_has_imports_to_check():
    # The reader itself: it sees module-level and function-level imports, relative ones too.
    edges = {(src, dst) for src, dst, _ in IMPORTS}
    assert ("hyrl.train.trainer", "hyrl.backends.factory") in edges
    assert ("hyrl.backends.factory", "hyrl.backends.megatron.backend") in edges  # in a function
    assert len(IMPORTS) > 300


@pytest.mark.parametrize("rule", list(RULES))
def test_import_rule(rule):
    assert _violations(*RULES[rule]) == []


def test_a_broken_rule_is_reported():
    # The check can fail: the loop does import the backend factory, so forbidding it reports it.
    assert any("hyrl.train.trainer" in v for v in _violations(LOOP, ("hyrl.backends.factory",)))
    # ... and the engine factory imports the SGLang package, the rule's one allowed importer
    assert any(
        v.startswith("hyrl.rollout.build ")
        for v in _violations(("hyrl",), ("hyrl.rollout.sglang",))
    )
    # ... and the profiler imports the runtime's engines, the way its rule allows and not back
    assert any(
        v.startswith("hyrl.profile.cli ") for v in _violations(("hyrl",), ("hyrl.rollout.build",))
    )


CPU_COMPAT = "hyrl.backends.megatron.cpu_compat"


def test_cpu_compat_is_one_door_and_imports_no_other_hyrl_module():
    # Callers use the package's names (its __init__), never one of its modules; its modules
    # import one another and megatron or torch, nothing else of hyrl.
    edges = {(src, dst) for src, dst, _ in IMPORTS}
    assert (CPU_COMPAT, f"{CPU_COMPAT}.kernels") in edges
    assert ("hyrl.backends.megatron.model", CPU_COMPAT) in edges
    inside = (CPU_COMPAT,)
    into_its_modules = [
        f"{src} (line {line}) imports {dst}"
        for src, dst, line in IMPORTS
        if not _within(src, inside) and _within(dst, inside) and dst != CPU_COMPAT
    ]
    out_of_it = [
        f"{src} (line {line}) imports {dst}"
        for src, dst, line in IMPORTS
        if _within(src, inside) and dst in MODULES and not _within(dst, inside)
    ]
    assert into_its_modules == [] and out_of_it == []


def test_the_module_level_reader_leaves_out_imports_in_functions_only():
    at_import = {(src, dst) for src, dst, _ in _imports_at_import()}
    assert ("hyrl.train.trainer", "hyrl.backends.factory") in at_import  # at the top of trainer.py
    assert ("hyrl.backends.factory", "hyrl.backends.megatron.backend") not in at_import


def _lines_naming(text: str, files) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(files)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if text in line
    ]


def test_production_code_reads_no_test_hook():
    # test hooks are patched in from tests/helpers/subprocess_hooks.py by the tests that use them
    assert _lines_naming("HYRL_TEST_", PACKAGE.rglob("*.py")) == []
    assert _lines_naming("HYRL_TEST_", [HELPERS / "subprocess_hooks.py"])  # where they live


# What assembles the config from the concerns (hyrl/config/concerns/) and orders them.
CONFIG_ASSEMBLY = (
    "hyrl.config.fields",
    "hyrl.config.parser",
    "hyrl.config.resolve",
    "hyrl.config.validate",
    "hyrl.config.resume",
    "hyrl.config.conditional_flags",
    "hyrl.config.docs",
)


def test_no_import_cycle_between_modules():
    # Imports inside functions count; those under `if TYPE_CHECKING:` never run and do not.
    assert _cycles(_module_graph(_imports(with_typing_only=False))) == []


def _package_graph(imports: list[tuple[str, str, int]]) -> dict[str, set[str]]:
    """hyrl's top-level packages and modules (hyrl.train, hyrl.config, ...) and which of them
    each imports."""
    graph: dict[str, set[str]] = {}
    for src, dst, _ in imports:
        if src.startswith("hyrl.") and dst.startswith("hyrl."):
            a, b = (".".join(name.split(".")[:2]) for name in (src, dst))
            if a != b:
                graph.setdefault(a, set()).add(b)
    return graph


def test_no_two_packages_import_each_other():
    # One level up from the modules, annotations counted too: the parts form layers (the loop
    # uses the config, never the config the loop), so no package reaches back into one that
    # reaches it.
    graph = _package_graph(_imports(with_typing_only=True))
    assert "hyrl.config" in graph["hyrl.train"]
    assert _cycles(graph) == []


def test_no_cycle_even_through_annotations():
    # Counting the imports under `if TYPE_CHECKING:` as well: no cycle. The concerns used to
    # name the config they make up (RunConfig, ResolvedConfig) in their annotations; now each
    # function takes the concerns' Flags it reads (`test_a_concern_imports_only_earlier_ones`).
    assert _cycles(_module_graph(_imports(with_typing_only=True))) == []


def _concerns_order() -> list[str]:
    """The concerns in the order hyrl/config/concerns/__init__.py gives (its docstring's
    paragraph `Order: model, run, ...`)."""
    source = (PACKAGE / "config" / "concerns" / "__init__.py").read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    paragraph = doc[doc.index("Order: ") :].split("\n\n")[0]
    names = paragraph.removeprefix("Order: ").rstrip(".").split(",")
    return [name.strip() for name in names]


def test_a_concern_imports_only_earlier_ones():
    # The concerns form layers: a concern reads the flags of concerns before it (typed by their
    # Flags classes) and gets a later concern's values as arguments, so no two concerns import
    # each other. A concern declares, resolves and checks its own flags; RunConfig, the parser
    # and the order of resolution and checks import the concerns, never the other way round,
    # not even for an annotation.
    order = _concerns_order()
    prefix = "hyrl.config.concerns."
    concerns = {m.removeprefix(prefix) for m in MODULES if m.startswith(prefix)}
    assert sorted(order) == sorted(concerns)
    wrong = []
    for src, dst, line in IMPORTS:
        if not src.startswith(prefix) or dst not in MODULES:
            continue
        source = order.index(src.removeprefix(prefix))
        if dst.startswith(prefix) and order.index(dst.removeprefix(prefix)) >= source:
            if dst != src:
                wrong.append(f"{src}:{line} imports the later concern {dst}")
        elif _within(dst, CONFIG_ASSEMBLY):
            wrong.append(f"{src}:{line} imports the assembly {dst}")
    assert wrong == []


def test_a_planted_cycle_is_reported():
    graph = _module_graph(_imports(with_typing_only=False))
    graph.setdefault("hyrl.config.errors", set()).add("hyrl.train.trainer")  # errors -> the loop
    (cycle,) = _cycles(graph)
    assert "hyrl.config.errors" in cycle and "hyrl.train.trainer" in cycle
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# A file is read in one sitting: past its cap it is split by concern. The loop is capped lower so
# that one rollout step reads top to bottom in hyrl/train/trainer.py.
LINE_CAP = 600
LINE_CAPS = {Path("hyrl/train/trainer.py"): 400}
CAPPED_FOLDERS = ("hyrl", "tools")


def _over_their_caps(root: Path) -> list[str]:
    """Each .py file under root's CAPPED_FOLDERS longer than its cap, with its line count."""
    over = []
    for folder in CAPPED_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root)
            lines = len(path.read_text().splitlines())
            cap = LINE_CAPS.get(name, LINE_CAP)
            if lines > cap:
                over.append(f"{name}: {lines} lines, over its cap of {cap}")
    return over


def test_every_file_fits_its_line_cap():
    over = _over_their_caps(ROOT)
    assert over == [], "files over their line cap (split each by concern):\n" + "\n".join(over)


def test_a_file_over_its_cap_is_reported(tmp_path):
    def plant(name: str, lines: int) -> None:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# a line\n" * lines)

    plant("hyrl/at_the_cap.py", 600)
    plant("hyrl/deep/over.py", 601)
    plant("tools/over.py", 900)
    plant("hyrl/train/trainer.py", 401)
    plant("hyrl/train/not_the_trainer.py", 401)
    plant("docs/not_capped.py", 900)
    assert _over_their_caps(tmp_path) == [
        "hyrl/deep/over.py: 601 lines, over its cap of 600",
        "hyrl/train/trainer.py: 401 lines, over its cap of 400",
        "tools/over.py: 900 lines, over its cap of 600",
    ]


# A part takes the settings views it needs (`ResolvedConfig.batch`, `.optimizer`, ...), not the
# whole config: a reader then sees from a signature what the part depends on. These take the
# whole config, each for its reason; hyrl/config/ itself is not counted.
WHOLE_CONFIG_TAKERS = {
    "hyrl/train/cli.py:train": "the command's entry: makes the trainer and the run's records",
    "hyrl/train/trainer.py:Trainer.__init__": "assembles the parts, handing each its views",
    "hyrl/train/preflight.py:preflight": "checks every file and engine before a process group",
    "hyrl/backends/factory.py:build_backend": "the backend builds its models from most concerns",
    "hyrl/plan/make.py:make_plan": "hyrl plan's entry: every concern has a line in the plan",
}
WHOLE_CONFIG = ("RunConfig", "ResolvedConfig")


def _whole_config_takers(root: Path) -> dict[str, str]:
    """`file:Class.function` -> the parameter, for each function under root's hyrl/ (outside
    hyrl/config/) with a parameter annotated with the whole config, or an unannotated one
    named `cfg` or of a `from_flags` (which took the whole config untyped)."""
    found = {}
    for path in sorted((root / "hyrl").rglob("*.py")):
        name = path.relative_to(root)
        if name.parts[1] == "config":
            continue
        tree = ast.parse(path.read_text(), str(path))
        scopes = {
            id(child): node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for child in node.body
        }
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for arg in args:
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                untyped = arg.arg == "cfg" or (
                    node.name == "from_flags" and arg.arg not in ("cls", "self")
                )
                if any(w in annotation for w in WHOLE_CONFIG) or untyped and not annotation:
                    scope = scopes.get(id(node))
                    qualified = f"{scope}.{node.name}" if scope else node.name
                    found[f"{name}:{qualified}"] = arg.arg
    return found


def test_parts_take_their_settings_views_not_the_whole_config():
    takers = _whole_config_takers(ROOT)
    assert "hyrl/train/trainer.py:Trainer.__init__" in takers  # the reader sees methods
    unnamed = sorted(set(takers) - set(WHOLE_CONFIG_TAKERS))
    assert unnamed == [], "these take the whole config: give each the views it needs"
    assert len(WHOLE_CONFIG_TAKERS) <= 5


def test_a_part_taking_the_whole_config_is_reported(tmp_path):
    part = tmp_path / "hyrl" / "part.py"
    part.parent.mkdir()
    (tmp_path / "hyrl" / "config").mkdir()
    part.write_text(
        "class Part:\n"
        "    def __init__(self, cfg: 'ResolvedConfig', batch: 'BatchView'): ...\n"
        "    @classmethod\n"
        "    def from_flags(cls, flags): ...\n"
        "def fine(batch: BatchView, n: int): ...\n"
        "def whole(c: RunConfig | None): ...\n"
        "def untyped(cfg, run_dir: str): ...\n"
    )
    (tmp_path / "hyrl" / "config" / "resolve.py").write_text("def resolve(c: RunConfig): ...\n")
    assert _whole_config_takers(tmp_path) == {
        "hyrl/part.py:Part.__init__": "cfg",
        "hyrl/part.py:Part.from_flags": "flags",
        "hyrl/part.py:whole": "c",
        "hyrl/part.py:untyped": "cfg",
    }
