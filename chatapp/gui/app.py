"""Start the desktop app: QApplication on a qasync (asyncio) event loop, then the startup
coroutine: prepare the default model on first run (with a progress dialog), then load it.

Long work never runs on the GUI thread: preparing the model is a job on the window's tool
runner, loading it one on the engine runner (chatapp/gui/common/workers.py), and the coroutine
awaits their signals.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from chatapp.engine.devices import KNOWN_NAMES
from chatapp.engine.modes import MODES
from chatapp.gui.chat.feature import chat_of, install_chat
from chatapp.gui.common.load_memory import last_model
from chatapp.gui.common.progress import ConversionProgressDialog
from chatapp.gui.common.settings import (
    APPLICATION,
    ORGANIZATION,
    SETTINGS_NOTICES,
    SettingsGuard,
    open_settings,
)
from chatapp.gui.common.terminate import quit_on_terminate
from chatapp.gui.common.workers import YieldedBatch
from chatapp.gui.compare.feature import install_compare
from chatapp.gui.compare.speculative_feature import install_speculative
from chatapp.gui.history.controller import open_history
from chatapp.gui.history.ui import install_history
from chatapp.gui.main_window import MainWindow
from chatapp.gui.models.feature import install_models
from chatapp.gui.remote.ui import install_remote
from chatapp.logs import setup_logging
from chatapp.session import arg_checks as checks
from chatapp.session.model_jobs import Progress, prepare_default_model_job

_app: QApplication | None = None  # keep a reference: Qt must not outlive its Python wrapper


# Qt's own command-line options (QGuiApplication, QApplication, xcb): they go to Qt; anything
# else that the GUI does not know is a mistake, said in one line, not silently ignored.
QT_OPTIONS_WITH_VALUE = frozenset(
    (
        "platform", "platformpluginpath", "platformtheme", "plugin", "qwindowgeometry",
        "qwindowicon", "qwindowtitle", "session", "style", "stylesheet", "display", "geometry",
        "name", "title", "visual", "qmljsdebugger", "fontengine", "dialogs",
    )
)  # fmt: skip
QT_FLAGS = frozenset(("reverse", "widgetcount", "nograb", "dograb", "sync", "ncols", "cmap"))
MAX_QUIT_AFTER_MS = 24 * 3600 * 1000


def _model_folder(value: str) -> Path:
    """A folder name that can be one; whether it holds a model, the window says (a banner)."""
    if not checks.text(value).strip() or "\0" in value or len(value) > checks.MAX_NAME:
        raise argparse.ArgumentTypeError(f"{checks.printable(value)!r} is not a folder name")
    return Path(value)


def _device(value: str) -> str:
    name = checks.text(value).strip().lower()
    if name not in KNOWN_NAMES:
        raise argparse.ArgumentTypeError(
            f"unknown device {checks.printable(value)!r}; choose from {', '.join(KNOWN_NAMES)} "
            "(`chatapp devices` lists this machine's)"
        )
    return name


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The GUI's options; Qt's own (e.g. -platform, -style) are left for Qt. A bad value or
    an unknown argument ends with one line on stderr (exit status 2), as the CLI's do."""
    parser = checks.OneLineParser(
        prog="chatapp", description="Chat with small local language models on ONNX Runtime."
    )
    parser.add_argument("--model", type=_model_folder, default=None, help="model folder to open")
    parser.add_argument(
        "--onnx-file",
        type=checks.onnx_file,
        default=None,
        metavar="NAME",
        help="which graph of the model folder, e.g. onnx/model_q4.onnx (see `chatapp variants`)",
    )
    parser.add_argument(
        "--device", type=_device, default=None, help="cpu, cuda, dml, coreml, openvino"
    )
    parser.add_argument("--mode", choices=MODES, default=None, help="generation loop")
    parser.add_argument(
        "--quit-after-ms",
        type=checks.whole(0, MAX_QUIT_AFTER_MS, "a time in milliseconds"),
        default=None,
        metavar="N",
        help="close the window N ms after it is shown (smoke tests of packaged builds)",
    )
    args, rest = parser.parse_known_args(argv)
    problem = _not_for_qt(rest)
    if problem:
        parser.error(problem)
    if args.onnx_file is not None and args.model is None:
        parser.error("--onnx-file needs --model (the folder the graph is in)")
    return args, rest


def _not_for_qt(rest: list[str]) -> str:
    """Why an argument left over by the GUI's parser is not one of Qt's ("" if all are)."""
    index = 0
    while index < len(rest):
        arg = rest[index]
        name = arg.lstrip("-").split("=", 1)[0]
        if not arg.startswith("-") or arg in ("-", "--"):
            return (
                f"unexpected argument {checks.printable(arg)!r} (a command name? see "
                "`chatapp --help`)"
            )
        if name in QT_OPTIONS_WITH_VALUE:
            index += 1 if "=" in arg else 2
            if index > len(rest):
                return f"{arg} needs a value"
        elif name in QT_FLAGS:
            index += 1
        else:
            return f"unrecognized arguments: {checks.printable(arg)}"
    return ""


def application(qt_args: list[str] | None = None) -> QApplication:
    global _app
    app = QApplication.instance()
    if app is None:
        app = QApplication([sys.argv[0] if sys.argv else "chatapp", *(qt_args or [])])
    assert isinstance(app, QApplication)
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("chatapp")
    app.setDesktopFileName("chatapp")  # Wayland matches the window to chatapp.desktop
    icon = resources.files("chatapp.resources").joinpath("chatapp.svg")
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    _app = app
    return app


def create_window(args: argparse.Namespace) -> MainWindow:
    """The window with the command line's choices preselected; no model requested yet."""
    # The chat (MainWindow's `chat`) is built first, inside the frame: its controller, view
    # and side panel, and the answers' flow between them (it shows an answer before the
    # history stores it). Then the features:
    features: list[Callable[[MainWindow], object]] = [
        # View > Compare loops: the two loops measured on the loaded model.
        install_compare,
        # View > Plain vs speculative: one prompt answered both ways (engine/speculative.py).
        install_speculative,
        # File > Open model folder / Open GGUF / Models: variants, conversion, the library.
        install_models,
        # The chat history (CHATAPP_DATA_DIR/history.sqlite3); a damaged file is moved aside
        # and the window says where, a file from a newer chatapp turns history off this run.
        lambda window: install_history(window, open_history()),
        # File > Connect to server… and Serve this model (docs/server.md, "The window").
        install_remote,
    ]
    settings = open_settings()
    window = MainWindow(settings, install_chat, features=features)
    # A settings file that was a link (or not a file) was moved aside: said once, in a line.
    guard = settings.findChild(SettingsGuard)
    if guard is not None:
        guard.notify = lambda line: window.show_message(line, "warning")
    while SETTINGS_NOTICES:
        window.show_message(SETTINGS_NOTICES.pop(0), "warning")
    chat_of(window).preselect(args.mode, args.device)
    return window


def prepared_default_model() -> Path | None:
    """The default model folder if it exists (cheap check, no hashing)."""
    from chatapp.convert.default_model import default_model_dir

    folder = default_model_dir()
    return folder if (folder / "model.onnx").is_file() else None


def model_to_open(window: MainWindow, args: argparse.Namespace) -> tuple[Path | None, str | None]:
    """The command line's model, else the one used last (None, None: the default model)."""
    if args.model is not None:
        return args.model, args.onnx_file
    last = last_model(window.settings)
    return last if last is not None else (None, None)


def build_window(argv: list[str]) -> MainWindow:
    """Build and show the main window from command-line arguments, without entering the event
    loop. The model starts loading in the worker thread at once; the window tells the user
    when the default model is not prepared (the full app prepares it, see `main`)."""
    args, qt_args = parse_args(argv)
    application(qt_args)
    window = create_window(args)
    window.show()
    folder, onnx_file = model_to_open(window, args)
    folder = folder or prepared_default_model()
    if folder is not None:
        window.open_model(folder, args.device, onnx_file)
    else:
        window.show_message(
            "The default model is not prepared yet: run `chatapp` (or `chatapp prepare`) "
            "once, or open a model folder from the File menu.",
            "info",
        )
    return window


class Connectable(Protocol):
    """A Qt signal or a session event (session/events.py)."""

    def connect(self, callback: Callable[..., object], /) -> object: ...
    def disconnect(self, callback: Callable[..., object], /) -> object: ...


async def wait_for_signals(
    start: Callable[[], bool], ok: Connectable, *failed: Connectable
) -> bool:
    """Call `start`, then wait for `ok` (True) or any of `failed` (False) without blocking Qt."""
    future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def on_ok(*_args: object) -> None:
        if not future.done():
            future.set_result(True)

    def on_failed(*_args: object) -> None:
        if not future.done():
            future.set_result(False)

    ok.connect(on_ok)
    for signal in failed:
        signal.connect(on_failed)
    try:
        if not start():
            return False
        return await future
    finally:
        ok.disconnect(on_ok)
        for signal in failed:
            signal.disconnect(on_failed)


class _PreparationDialog(ConversionProgressDialog):
    """The progress dialog of a first-run conversion. It opens with the first progress
    report, so checking an already prepared copy shows nothing."""

    def __init__(self, window: MainWindow, cancel: Callable[[], None]) -> None:
        super().__init__(
            window,
            "prepareProgressDialog",
            "Preparing the default model",
            "Converting the bundled SmolLM2-135M model for ONNX Runtime (first run only):\n"
            "{message}… {left}",
            cancel,
            min_width=420,
        )

    def show(self, batch: YieldedBatch) -> None:
        progress = [item for item in batch.items if isinstance(item, Progress)]
        if progress:
            self.report(progress[-1].fraction, progress[-1].message)


async def prepare_default_model_async(window: MainWindow) -> Path | None:
    """Make sure the default model is there; converts it (about 8 s) on first run, with a
    progress dialog. Returns the folder, or None after telling the user what went wrong.

    The conversion is a job on the window's tool runner (its own thread), like all long work
    that does not use the engine."""
    window.statusBar().showMessage("Checking the default model…")
    chat_of(window).set_hint("Preparing the default model…")
    window.busy.start("Preparing the default model")
    handle = window.tools.submit(prepare_default_model_job())
    folders: list[Path] = []
    problems: list[tuple[str, str]] = []  # (message, banner level)
    dialog = _PreparationDialog(window, handle.stop)
    handle.sig_yielded.connect(dialog.show)
    handle.sig_finished.connect(folders.append)
    handle.sig_errored.connect(lambda error: problems.append((error.message, "error")))
    handle.sig_aborted.connect(lambda message: problems.append((message, "info")))
    # Quitting abandons the conversion (the converter removes its partial folder).
    app = QApplication.instance()
    if app is not None:
        app.aboutToQuit.connect(handle.stop)
    try:
        await wait_for_signals(
            lambda: True, handle.sig_finished, handle.sig_errored, handle.sig_aborted
        )
    finally:
        if app is not None:
            app.aboutToQuit.disconnect(handle.stop)
        dialog.close()
        window.busy.stop()
        window.statusBar().clearMessage()
    if problems:
        window.show_message(*problems[0])
        return None
    return folders[0] if folders else None


async def startup(window: MainWindow, args: argparse.Namespace) -> bool:
    """Open the requested model (preparing the default one first if needed)."""
    folder, onnx_file = model_to_open(window, args)
    c = chat_of(window).controller
    last = folder
    if last is not None and args.model is None:
        # The model used last; if it no longer loads, the default one (the banner says why).
        if await wait_for_signals(
            lambda: window.open_model(last, args.device, onnx_file),
            c.backend_session.events.model_loaded,
            c.backend_session.events.load_failed,
        ):
            return True
        folder = None
    if folder is None:
        folder = await prepare_default_model_async(window)
        if folder is None:
            return False
        onnx_file = None
    target: Path = folder
    return await wait_for_signals(
        lambda: window.open_model(target, args.device, onnx_file),
        c.backend_session.events.model_loaded,
        c.backend_session.events.load_failed,
    )


def schedule_quit(window: MainWindow, after_ms: int) -> None:
    """Say when the window is on screen, and close it (the normal exit path) later."""

    def shown() -> None:
        print(
            f"chatapp: window shown ({window.width()}x{window.height()})",
            file=sys.stderr,
            flush=True,
        )
        QTimer.singleShot(max(0, after_ms), window.close)

    QTimer.singleShot(0, shown)  # runs once the event loop has drawn the shown window


def main(argv: list[str] | None = None) -> int:
    import qasync

    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    args, qt_args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        setup_logging()
    except OSError as exc:  # a read-only data folder: the app still runs, without a log file
        print(f"chatapp: no log file ({exc})", file=sys.stderr)
    app = application(qt_args)
    quit_on_terminate(app)  # SIGTERM: quit as closing does, so jobs clean up (a .partial folder)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = create_window(args)
    window.show()
    if args.quit_after_ms is not None:
        schedule_quit(window, args.quit_after_ms)
    task = loop.create_task(startup(window, args))
    try:
        with loop:
            loop.run_forever()
    finally:
        if not task.done():
            task.cancel()
        window.shutdown()
    return 0
