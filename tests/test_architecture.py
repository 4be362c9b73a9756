"""The house rules that hold the layers apart, checked on the source (no imports, no Qt).

Every module under chatapp/ is parsed; every `import` in it counts, at module level or inside a
function (a function-level import is still a dependency, only a later one), except those under
`if TYPE_CHECKING:`, which never run; the cycle check below the GUI counts those too (a cycle
that only the type checker sees still ties two modules together). docs/architecture.md explains
the layers.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "chatapp"

QT_PACKAGES = ("PySide6", "shiboken6", "qasync", "PyQt5", "PyQt6")

# Top to bottom: a module may import its own package and anything in a lower layer. Packages
# in one layer are siblings and do not import each other. The front ends (window, command
# line) sit on top; `chatapp serve` on the session's jobs (the command line starts it); the
# remote client and the hub's downloads beside the store (all build on the engine's types and
# the hub on the converter's families too); the store keeps what the
# engine measures; the engine and the converter are siblings (the engine runs any folder, made
# by chatapp or not) that share the folder format below them. A new package must be placed here.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("chatapp.gui", "chatapp.cli"),
    ("chatapp.server",),
    ("chatapp.session",),
    ("chatapp.store", "chatapp.remote", "chatapp.hub"),
    ("chatapp.engine", "chatapp.convert"),
    ("chatapp.folder_format",),
    ("chatapp",),  # the top-level modules (__init__, datadir, logs, units), not packages
)
# The command line starts the window and draws bench charts through the names that
# chatapp.gui exports, imported inside the function that needs them (Qt loads only then).
GUI_ENTRY_POINTS = frozenset({"run_app", "write_bench_report"})
EMIT_HELPER = PACKAGE / "gui" / "common" / "qtcompat.py"


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports: a module or package name
    names: tuple[str, ...]  # for `from target import a, b`
    line: int
    in_function: bool

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(
    node: ast.AST, in_function: bool, type_checking: bool = False
) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
            for sub in child.orelse:
                yield from _walk(sub, in_function)
            continue
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        yield child, inner
        yield from _walk(child, inner, type_checking)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def imports_of(module: str, type_checking: bool = False) -> tuple[Import, ...]:
    """The module's imports; with `type_checking`, also those under `if TYPE_CHECKING:`."""
    path = modules()[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[Import] = []
    for node, in_function in _walk(tree, False, type_checking):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(module, alias.name, (), node.lineno, in_function))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            names = tuple(a.name for a in node.names)
            # `from package import submodule` depends on the submodule itself.
            subs = [n for n in names if f"{target}.{n}" in modules()]
            for name in subs:
                found.append(Import(module, f"{target}.{name}", (), node.lineno, in_function))
            if len(subs) < len(names):
                rest = tuple(n for n in names if n not in subs)
                found.append(Import(module, target, rest, node.lineno, in_function))
    return tuple(found)


def internal(target: str) -> str | None:
    """The chatapp module an import names (a package counts as its __init__), else None."""
    while target:
        if target in modules():
            return target
        target = target.rpartition(".")[0]
    return None


def layer_of(module: str) -> tuple[int, str]:
    if module == "chatapp.__main__":  # `python -m chatapp`: the command line
        module = "chatapp.cli"
    for depth, packages in enumerate(LAYERS):
        for package in packages:
            if package == "chatapp":
                if module == "chatapp" or (
                    module.count(".") == 1 and modules()[module].name != "__init__.py"
                ):
                    return depth, package
            elif module == package or module.startswith(package + "."):
                return depth, package
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_only_the_gui_imports_qt() -> None:
    wrong = [
        str(imp)
        for module in modules()
        if not _in(module, "chatapp.gui")
        for imp in imports_of(module)
        if imp.target.split(".")[0] in QT_PACKAGES
    ]
    assert wrong == [], "Qt outside chatapp/gui:\n" + "\n".join(wrong)


def may_import(module: str, target: str) -> bool:
    """Whether the layers let `module` import `target` (both chatapp modules)."""
    depth, package = layer_of(module)
    target_depth, target_package = layer_of(target)
    return target_package == package or target_depth > depth


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for module in modules():
        for imp in imports_of(module):
            target = internal(imp.target)
            if target is None or may_import(module, target) or _is_gui_entry_point(imp):
                continue
            wrong.append(f"{imp} ({layer_of(module)[1]} may not import {layer_of(target)[1]})")
    assert wrong == [], "\n".join(wrong)


def test_the_engine_and_the_converter_share_only_the_folder_format() -> None:
    # The engine opens folders other tools made too: it reads the format, never the converter.
    engine, convert = "chatapp.engine.engine", "chatapp.convert.converter"
    assert not may_import(engine, convert)
    assert not may_import(convert, engine)
    assert may_import(engine, "chatapp.folder_format.graph")
    assert may_import(convert, "chatapp.folder_format.manifest")
    assert not may_import("chatapp.folder_format.graph", engine)


def _is_gui_entry_point(imp: Import) -> bool:
    return (
        _in(imp.module, "chatapp.cli")
        and imp.target == "chatapp.gui"
        and imp.in_function
        and bool(imp.names)
        and set(imp.names) <= GUI_ENTRY_POINTS
    )


def test_the_cli_reaches_the_gui_only_through_its_entry_points() -> None:
    uses = [
        imp
        for module in modules()
        if _in(module, "chatapp.cli")
        for imp in imports_of(module)
        if internal(imp.target) is not None and _in(internal(imp.target) or "", "chatapp.gui")
    ]
    assert uses, "the CLI starts the window somewhere"
    assert all(_is_gui_entry_point(imp) for imp in uses), [str(i) for i in uses]
    gui_init = ast.parse((PACKAGE / "gui" / "__init__.py").read_text(encoding="utf-8"))
    exported = next(
        node.value
        for node in gui_init.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
    )
    assert {ast.literal_eval(e) for e in exported.elts} == GUI_ENTRY_POINTS  # type: ignore[attr-defined]


# The server reaches the engine only through session/ (session/answer.py answers every request):
# at run time a server module imports from chatapp.engine only its vocabulary (messages,
# output formats, errors, loop names, sampling settings, tools), the rest only for types under
# TYPE_CHECKING; and no server module calls what runs a model.
SERVER_ENGINE_VOCABULARY = frozenset(
    f"chatapp.engine.{m}"
    for m in (
        "text.chat",
        "structured.constraints",
        "errors",
        "modes",
        "sampling",
        "structured.tool_calls",
    )
)
MODEL_RUNNING_CALLS = frozenset({"chat", "generate_ids", "warm_up", "fall_back_to_cpu"})


def _model_running_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MODEL_RUNNING_CALLS
        ):
            yield node.lineno, node.func.attr


def test_the_server_reaches_the_engine_only_through_the_session() -> None:
    wrong = []
    for module, path in modules().items():
        if not _in(module, "chatapp.server"):
            continue
        for imp in imports_of(module):
            target = internal(imp.target) or ""
            if _in(target, "chatapp.engine") and target not in SERVER_ENGINE_VOCABULARY:
                wrong.append(f"{imp} (only under TYPE_CHECKING)")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong += [f"{module}:{line} calls .{name}()" for line, name in _model_running_calls(tree)]
    assert wrong == [], "answer through chatapp.session.answer:\n" + "\n".join(wrong)


def test_the_server_rule_sees_a_generation_started_by_hand() -> None:
    source = (
        "def serve(worker):\n"
        "    for event in worker.engine.chat(messages, settings):\n"
        "        pass\n"
    )
    assert [name for _line, name in _model_running_calls(ast.parse(source))] == ["chat"]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for module in modules():
        for imp in imports_of(module, type_checking):
            target = internal(imp.target)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def test_no_import_cycles() -> None:
    assert find_cycles(import_graph()) == []


def test_no_import_cycles_even_under_type_checking() -> None:
    # Below the GUI for now; chatapp/gui joins once its own cycles are gone.
    graph = import_graph(type_checking=True)
    below_gui = {
        module: {t for t in targets if not _in(t, "chatapp.gui")}
        for module, targets in graph.items()
        if not _in(module, "chatapp.gui")
    }
    assert find_cycles(below_gui) == []


def test_every_package_has_a_layer() -> None:
    placed = {layer_of(module)[1] for module in modules()}  # raises for a package left out
    assert placed == {p for layer in LAYERS for p in layer}


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


def emit_calls(path: Path) -> list[str]:
    """`<something>.emit(...)` calls, except `super().emit(...)` (a logging handler's) and the
    session's own events (session/events.py: no Qt): those of the Qt-free session package and
    its tests, and `<...>events.<name>.emit(...)` elsewhere."""
    if path.is_relative_to(PACKAGE / "session") or path.is_relative_to(ROOT / "tests" / "session"):
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "emit"
        ):
            owner = node.func.value
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "super":
                continue
            if isinstance(owner, ast.Attribute) and ast.unparse(owner.value).endswith("events"):
                continue
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_signals_are_emitted_only_through_the_qtcompat_helper() -> None:
    # PySide6 6.12.0's SignalInstance.emit() drops a reference to True on Python 3.11, and a
    # streamed answer then aborts the interpreter: qtcompat.emit() gives it back.
    sources = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    direct = [hit for path in sources if path != EMIT_HELPER for hit in emit_calls(path)]
    assert direct == [], "use chatapp.gui.common.qtcompat.emit(signal, ...):\n" + "\n".join(direct)
    assert emit_calls(EMIT_HELPER), "the helper itself calls SignalInstance.emit"


def test_gui_and_session_tests_mirror_their_modules() -> None:
    """tests/<path>/test_<module>[_<topic>].py tests chatapp/<path>/<module>.py."""
    orphans = []
    for area in ("gui", "session"):
        for test in sorted((ROOT / "tests" / area).rglob("test_*.py")):
            folder = PACKAGE / test.parent.relative_to(ROOT / "tests")
            words = test.stem.removeprefix("test_").split("_")
            candidates = ("_".join(words[:n]) for n in range(len(words), 0, -1))
            if not any((folder / f"{name}.py").is_file() for name in candidates):
                orphans.append(str(test.relative_to(ROOT)))
    assert orphans == [], "no module of that name beside the mirrored path"


def test_the_command_line_and_the_gui_package_load_no_qt() -> None:
    code = (
        "import sys, chatapp.cli, chatapp.gui, chatapp.session.context, "
        "chatapp.session.formatting, chatapp.store\n"
        f"qt = sorted(m for m in sys.modules if m.split('.')[0] in {QT_PACKAGES!r})\n"
        "print(qt)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]", out.stderr


def _gui_graph_with_type_checking_imports() -> dict[str, set[str]]:
    """The GUI's import graph, `if TYPE_CHECKING:` imports included: a feature names the
    window's type through a protocol or the window itself, never the other way round."""
    gui = {m for m in modules() if _in(m, "chatapp.gui")}
    graph: dict[str, set[str]] = {m: set() for m in gui}
    for module in gui:
        tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, modules()[module].name == "__init__.py", node)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for target in targets:
                found = internal(target)
                if found in gui and found != module:
                    graph[module].add(found)
    return graph


def test_the_gui_has_no_import_cycles_even_under_type_checking() -> None:
    assert find_cycles(_gui_graph_with_type_checking_imports()) == []


def test_features_do_not_add_attributes_to_the_window() -> None:
    """Features register with the window (add_feature, menus.add_menu, add_pane, the hooks'
    lists) instead of setting attributes on it that its type does not declare."""
    hits = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((PACKAGE / "gui").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "type: ignore[attr-defined" in line
    ]
    assert hits == [], "\n".join(hits)


# What a feature (gui/<package>/) may use of MainWindow: the frame's declared interface (what
# it runs on, what it is told, what it says, what it plugs into; docs/architecture.md,
# "The core and its faces") ...
FEATURE_PACKAGES = ("chat", "compare", "history", "models", "remote")
WINDOW_API = frozenset(
    {
        # what it runs on and reads
        "settings", "runner", "tools", "host", "open_model",
        # the chat (a ChatFace: gui/chat/feature.py's chat_of(window) gives the feature)
        "chat",
        # what it plugs into
        "menus", "add_pane", "add_view", "add_status_widget", "add_feature", "feature",
        "before_shutdown", "leave_checks", "busy_checks", "refresh_controls",
        "new_chat", "may_leave_chat", "installEventFilter",
        # what it says
        "notify", "show_message", "shown_message", "dismiss_message", "show_backend", "busy",
    }
)  # fmt: skip


def _window_uses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, attribute) for each attribute read on the window: `self.window.X`, or `X` on a
    name that is a parameter typed MainWindow or bound to `self.window`."""

    def is_self_window(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "window"
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        )

    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if "MainWindow" in ast.unparse(node.annotation):
                names.add(node.arg)
        elif isinstance(node, ast.Assign) and is_self_window(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if is_self_window(base) or (isinstance(base, ast.Name) and base.id in names):
            yield node.lineno, node.attr


def test_features_use_only_the_windows_declared_interface() -> None:
    wrong = []
    for package in FEATURE_PACKAGES:
        for path in sorted((PACKAGE / "gui" / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for line, attr in _window_uses(tree):
                if attr not in WINDOW_API:
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: window.{attr}")
    assert wrong == [], "declare it on MainWindow and list it in WINDOW_API:\n" + "\n".join(wrong)


def test_the_window_interface_check_sees_reads() -> None:
    source = (
        "class F:\n"
        "    def __init__(self, window: MainWindow) -> None:\n"
        "        self.window = window\n"
        "        window.statusBar()\n"
        "    def later(self) -> None:\n"
        "        w = self.window\n"
        "        w.model_label.setText('x')\n"
        "        self.window.tabs.setCurrentIndex(1)\n"
    )
    used = {attr for _line, attr in _window_uses(ast.parse(source))}
    assert {"statusBar", "model_label", "tabs"} <= used


MAX_MODULE_LINES = 500  # CONTRIBUTING.md: modules small; past this, split by responsibility
# Modules that hold one thing each and may grow to COHESIVE_MAX_LINES: split, they would cut
# one meaning in two only to meet the cap above (docs/architecture.md, "The load, module by
# module"). Each with what it holds; a module enters the list only past MAX_MODULE_LINES.
COHESIVE_MAX_LINES = 1000
COHESIVE_MODULES = {
    "chatapp.engine.model_description": "a model as known before it runs: its folder read "
    "once for a device, the memory it will hold and the refusal, the sampling it starts with",
    "chatapp.engine.model_folder.read": "a model folder read: its files opened only inside it, "
    "its graph and configs described and checked",
    "chatapp.engine.mapped_weights": "the weight files a session maps: their pages kept "
    "resident only while used, the files kept from changing under an answer",
    "chatapp.engine.text.chat": "a model's tokenizer as the chat uses it: loaded from its "
    "folder, its chat template, its control tokens",
}


def line_count(module: str) -> int:
    return len(modules()[module].read_text(encoding="utf-8").splitlines())


def test_modules_stay_under_the_size_limit() -> None:
    too_long = {
        name: count
        for name in modules()
        if (count := line_count(name))
        > (COHESIVE_MAX_LINES if name in COHESIVE_MODULES else MAX_MODULE_LINES)
    }
    assert not too_long, f"modules over their limit (split them by meaning): {too_long}"


def test_the_cohesive_modules_are_there_and_need_the_higher_limit() -> None:
    listed = {name: line_count(name) if name in modules() else None for name in COHESIVE_MODULES}
    wrong = {
        name: count for name, count in listed.items() if not count or count <= MAX_MODULE_LINES
    }
    assert not wrong, f"take these off COHESIVE_MODULES (gone, or under the usual limit): {wrong}"


# ---- the chat's widgets: what other features may use of them --------------------------------
# The chat feature (gui/chat) owns its view and side panel. Anywhere else under chatapp/, an
# attribute read on either is one of these names (methods and signals they declare for other
# features), never a widget inside them (`side_panel.sampling_box`, `chat_view.transcript`).
CHAT_WIDGET_API: dict[str, frozenset[str]] = {
    "side_panel": frozenset(
        {
            # the figures
            "start_answer", "show_stats", "set_context", "set_figure", "figure_tip",
            "loaded", "set_loaded", "sig_figures_shown",
            # what the next answer sends
            "sig_request_changed",
            # a backend's own box and notes (gui/remote/figures.py)
            "add_backend_box", "add_loop_note", "loop_title", "set_loop_title",
            "set_loop_unavailable",
            # the frame's scrolled pane is as narrow as the panel allows
            "minimumSizeHint",
        }
    ),
    "chat_view": frozenset(
        {
            # the history's edit mode, unsaved marks and context
            "sig_edit_submitted", "begin_edit", "finish_edit", "cancel_edit",
            "set_unsaved", "set_context",
        }
    ),
}  # fmt: skip
# A parameter annotated with one of these classes stands for that widget.
CHAT_WIDGET_CLASSES = {"SidePanel": "side_panel", "ChatView": "chat_view"}
CHAT_PACKAGE = PACKAGE / "gui" / "chat"
HANDED_ON = "<handed on>"


def chat_widget_reads(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, widget, attribute) for each use of the chat's widgets in a module: an attribute
    read on `X.side_panel` / `X.chat_view`, on a parameter annotated SidePanel / ChatView, or
    on a name or `self.` attribute assigned one of those (names count per module, not per
    function: stricter, never looser). A widget used otherwise than to read a name of it, to
    be assigned, or to be passed to a call (where the receiving parameter's annotation makes
    it checked again) is reported with the attribute HANDED_ON."""
    names: dict[str, str] = {}  # local names and parameters -> widget
    fields: dict[str, str] = {}  # self.<field> -> widget

    def widget_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute):
            if node.attr in CHAT_WIDGET_API:
                return node.attr
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return fields.get(node.attr)
        elif isinstance(node, ast.Name):
            return names.get(node.id)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            words = ast.unparse(node.annotation).replace("|", " ").split()
            for cls, widget in CHAT_WIDGET_CLASSES.items():
                if cls in words:
                    names[node.arg] = widget
    for _ in range(3):  # assignments of assignments (p = chat.side_panel; self.p = p)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
                continue
            widget = widget_of(node.value)
            if widget is None:
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names[target.id] = widget
                elif (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    fields[target.attr] = widget
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        widget = widget_of(node)
        if widget is None or isinstance(getattr(node, "ctx", None), ast.Store):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            yield node.lineno, widget, parent.attr
        elif isinstance(parent, ast.Assign | ast.AnnAssign | ast.keyword) or (
            isinstance(parent, ast.Call) and node in parent.args
        ):
            continue  # tracked above, or checked where the parameter is annotated
        else:
            yield node.lineno, widget, HANDED_ON


def test_no_feature_reads_the_chats_widgets() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(CHAT_PACKAGE):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, widget, attr in chat_widget_reads(tree):
            if attr not in CHAT_WIDGET_API[widget]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {widget}.{attr}")
    assert wrong == [], (
        "give the widget a method or signal for it and list it in CHAT_WIDGET_API:\n"
        + "\n".join(wrong)
    )


def test_the_chat_widget_rule_catches_reads_inside() -> None:
    source = (
        "class F:\n"
        "    def __init__(self, window: MainWindow, panel: SidePanel | None) -> None:\n"
        "        self.chat = chat_of(window)\n"
        "        self.chat.side_panel.sampling_box.max_tokens_spin.valueChanged.connect(f)\n"
        "        self.chat.side_panel.set_context(0, 1)\n"
        "        self.panel = panel\n"
        "        self.panel.figures_box.hide()\n"
        "        view = self.chat.chat_view\n"
        "        view.prompt_edit.setFocus()\n"
        "        view.cancel_edit()\n"
        "        self.boxes = [self.chat.side_panel]\n"
        "        Other(self.chat.chat_view)\n"
    )
    found = {(w, a) for _line, w, a in chat_widget_reads(ast.parse(source))}
    wrong = {(w, a) for w, a in found if a not in CHAT_WIDGET_API[w]}
    assert wrong == {
        ("side_panel", "sampling_box"),
        ("side_panel", "figures_box"),
        ("chat_view", "prompt_edit"),
        ("side_panel", HANDED_ON),
    }
    assert {("side_panel", "set_context"), ("chat_view", "cancel_edit")} <= found


# ---- the frame ----------------------------------------------------------------------------
FRAME_MODULES = ("chatapp.gui.main_window", "chatapp.gui.window")


def test_the_window_imports_no_feature() -> None:
    """The frame (main_window.py, gui/window/) knows the chat by the ChatFace protocol and the
    other features by what they plug in: it imports none of them, not even for types."""
    features = tuple(f"chatapp.gui.{package}" for package in FEATURE_PACKAGES)
    graph = _gui_graph_with_type_checking_imports()
    wrong = [
        f"{module} imports {target}"
        for module, targets in graph.items()
        if any(_in(module, frame) for frame in FRAME_MODULES)
        for target in sorted(targets)
        if any(_in(target, feature) for feature in features)
    ]
    assert wrong == [], "\n".join(wrong)
    app_imports = graph["chatapp.gui.app"]
    assert any(_in(t, "chatapp.gui.chat") for t in app_imports), "the check sees imports"


# A server answers through `Backend` (engine/backend.py) as the Engine does, and the window,
# the session and the server read what it is and measures from its card: no module outside
# chatapp/remote/ names a class of the remote package's own (RemoteEngine, its stats, events,
# client, errors), imports one of its modules, or defines a Remote* mirror of one. Outside,
# only the package's face counts (chatapp/remote/__init__.py: `__all__`), and of that face
# only session/remote_jobs.py calls the factories that make a server's backend.
REMOTE = "chatapp.remote"
REMOTE_FACTORIES = frozenset({"connect", "list_models"})
REMOTE_FACTORY_USER = "chatapp.session.remote_jobs"


@cache
def remote_face() -> frozenset[str]:
    tree = ast.parse(modules()[REMOTE].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = ast.literal_eval(node.value)
        elif isinstance(node, ast.AugAssign) and getattr(node.target, "id", "") == "__all__":
            names = [*names, *ast.literal_eval(node.value)]
    return frozenset(names)


@cache
def remote_classes() -> frozenset[str]:
    """The classes defined in chatapp/remote/ that its face does not export."""
    found = set()
    for module, path in modules().items():
        if module == REMOTE or module.startswith(REMOTE + "."):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    return frozenset(found - remote_face())


def remote_type_uses(module: str, source: str) -> list[str]:
    """Where `module` (outside chatapp/remote/) reaches past the remote package's face."""
    if module == REMOTE or module.startswith(REMOTE + "."):
        return []
    hidden, found = remote_classes(), []
    for node in ast.walk(ast.parse(source)):
        where = f"{module}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if a.name.startswith(REMOTE)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(REMOTE):
            if node.module != REMOTE:
                found.append(f"{where} imports {node.module}: only {REMOTE}'s face")
                continue
            for alias in node.names:
                if alias.name in REMOTE_FACTORIES and module != REMOTE_FACTORY_USER:
                    found.append(f"{where} makes a server's backend ({alias.name})")
                elif alias.name not in remote_face():
                    found.append(f"{where} imports {alias.name}, not on {REMOTE}'s face")
        elif isinstance(node, ast.Name) and node.id in hidden:
            found.append(f"{where} names {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in hidden:
            found.append(f"{where} names {node.attr}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Remote"):
            found.append(f"{where} defines {node.name}, a mirror of a server's type")
    return found


def test_only_chatapp_remote_names_a_remote_type() -> None:
    found = [
        use
        for module, path in modules().items()
        for use in remote_type_uses(module, path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)
    assert not [name for name in remote_face() if name.startswith("Remote")]
    assert {"RemoteEngine", "RemoteStats", "RemoteError"} <= remote_classes()


def test_the_remote_rule_sees_each_way_past_the_face() -> None:
    """Each way a module could lean on the server's classes again is caught."""
    broken = {
        "from chatapp.remote.engine import RemoteStats": "imports chatapp.remote.engine",
        "from chatapp.remote import connect": "makes a server's backend",
        "import chatapp.remote.client": "imports chatapp.remote.client",
        "ok = isinstance(stats, RemoteStats)": "names RemoteStats",
        "x = remote.engine.RemoteEngine": "names RemoteEngine",
        "class RemoteSummary: ...": "defines RemoteSummary",
        "from chatapp.remote import StreamReader": "not on chatapp.remote's face",
    }
    for source, words in broken.items():
        found = remote_type_uses("chatapp.session.chat_jobs", source)
        assert len(found) == 1 and words in found[0], (source, found)
    factory = "from chatapp.remote import connect, list_models"
    assert remote_type_uses(REMOTE_FACTORY_USER, factory) == []
    assert remote_type_uses("chatapp.gui.remote.ui", "from chatapp.remote import api_base") == []


# engine/ has four rooms. The runtime (engine/*.py and model_folder/) runs models; text/ turns
# messages into tokens and back; structured/ holds grammars and tool calls, over text; bench/
# measures the runtime. Text and structured output sit below the runtime and take from it only
# its errors and its folder-reading and memory helpers; nothing in the runtime reads bench/.
ENGINE_ROOMS = ("chatapp.engine.text", "chatapp.engine.structured", "chatapp.engine.bench")
RUNTIME_HELPERS_FOR_TEXT = frozenset(
    {
        "chatapp.engine.errors",
        "chatapp.engine.model_folder.read",
        "chatapp.engine.model_folder.model",
        "chatapp.engine.mapped_weights",
    }
)


def engine_room(module: str) -> str:
    return next((room for room in ENGINE_ROOMS if _in(module, room)), "chatapp.engine")


def may_enter(room: str, target: str) -> bool:
    """Whether a module in engine room `room` may import the engine module `target`."""
    target_room = engine_room(target)
    if room in (target_room, "chatapp.engine.bench"):
        return True
    if room == "chatapp.engine":
        return target_room != "chatapp.engine.bench"
    below = {"chatapp.engine.structured": {"chatapp.engine.text"}}.get(room, set())
    return target_room in below or target in RUNTIME_HELPERS_FOR_TEXT


def test_the_engine_rooms_point_one_way() -> None:
    wrong = []
    for module in modules():
        if not _in(module, "chatapp.engine"):
            continue
        for imp in imports_of(module, type_checking=True):
            target = internal(imp.target) or ""
            if _in(target, "chatapp.engine") and not may_enter(engine_room(module), target):
                wrong.append(f"{imp} ({engine_room(module)} may not use {engine_room(target)})")
    assert wrong == [], "\n".join(wrong)


def test_the_engine_room_rule_refuses_the_runtime_reading_text_upwards() -> None:
    assert may_enter("chatapp.engine", "chatapp.engine.text.chat")
    assert not may_enter("chatapp.engine", "chatapp.engine.bench.run")
    assert not may_enter("chatapp.engine.text", "chatapp.engine.loops")
    assert not may_enter("chatapp.engine.text", "chatapp.engine.structured.constraints")
    assert may_enter("chatapp.engine.structured", "chatapp.engine.text.chat")
    assert may_enter("chatapp.engine.text", "chatapp.engine.errors")


# One module owns the thread that runs a loaded model: the engine service (one thread and one
# queue: jobs, and the passes of a served batch's loop between them). The window's JobRunner,
# the server's worker, `chatapp generate` and `chatapp bench` submit to it. These modules make
# threads too, none of which runs the model.
ENGINE_SERVICE = "chatapp.session.engine_service"
THREADS_THAT_NEVER_RUN_THE_MODEL = {
    "chatapp.server.runner": "uvicorn's loop; its requests are jobs on the service",
    "chatapp.gui.models.hub_dialog": "the hub's downloads",
    "chatapp.engine.mapped_weights": "gives weight pages back to the system; watches the files",
    "chatapp.engine.structured.constraints": "compiles a grammar, with a time limit",
    "chatapp.remote.reader": "reads a server's stream",
    "chatapp.engine.bench.floor": "measures the memory's read bandwidth (numpy, no model)",
}
THREAD_MAKERS = frozenset(
    {"Thread", "QThread", "Timer", "ThreadPoolExecutor", "QThreadPool", "start_new_thread"}
)


def threads_made(module: str, source: str) -> list[str]:
    """Where `source` makes a thread: a call of a thread class, or a class derived from one."""
    found = []
    for node, _ in _walk(ast.parse(source), False, type_checking=True):
        named: list[ast.expr] = []
        if isinstance(node, ast.Call):
            named = [node.func]
        elif isinstance(node, ast.ClassDef):
            named = list(node.bases)
        for expr in named:
            name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")
            if name in THREAD_MAKERS:
                found.append(f"{module}:{node.lineno} makes a thread ({name})")
    return found


def test_only_the_engine_service_makes_threads_that_run_the_model() -> None:
    allowed = {ENGINE_SERVICE, *THREADS_THAT_NEVER_RUN_THE_MODEL}
    made = {
        module: threads_made(module, path.read_text(encoding="utf-8"))
        for module, path in modules().items()
    }
    wrong = [line for module, lines in made.items() if module not in allowed for line in lines]
    assert wrong == [], "\n".join(wrong)
    assert made[ENGINE_SERVICE], "the service makes the engine's threads"
    gone = [m for m in THREADS_THAT_NEVER_RUN_THE_MODEL if not made.get(m)]
    assert gone == [], f"allowed but making no thread (take them off the list): {gone}"


def test_the_thread_rule_sees_each_way_to_make_a_thread() -> None:
    for source in (
        "import threading\nthreading.Thread(target=f).start()",
        "from threading import Thread\nThread(target=f)",
        "from PySide6.QtCore import QThread\nt = QThread()",
        "class Worker(threading.Thread): ...",
        "from concurrent.futures import ThreadPoolExecutor\nThreadPoolExecutor(2)",
    ):
        assert len(threads_made("chatapp.session.jobs", source)) == 1, source
    assert threads_made("chatapp.gui.common.gui_thread", "QThread.currentThread()") == []


# The batch's loop, its slots and their scheduling run on the one thread that calls them (the
# service's): no thread, no lock, no waiting on another thread.
ONE_THREAD_BATCH = ("chatapp.engine.batch_loop", "chatapp.engine.slots", "chatapp.engine.slot_loop")


def test_the_batched_step_needs_no_thread_of_its_own() -> None:
    for module in ONE_THREAD_BATCH:
        used = {i.target for i in imports_of(module, type_checking=True)}
        assert not used & {"threading", "queue", "concurrent.futures"}, module
