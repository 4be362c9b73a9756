"""Time from launch to the main window being shown, under a private Xvfb (X11).

    python packaging/measure_startup.py [--runs 5] [--screenshot shot.png] [COMMAND ...]

COMMAND defaults to the Exec= line of the installed desktop entry
(/usr/share/applications/chatapp.desktop), i.e. exactly what a click on the icon runs.
Each run: start the command, poll `xdotool search --onlyvisible --name chatapp` every 10 ms
until the window is mapped (that is "shown"; the poll adds at most ~10 ms), optionally take a
screenshot after --settle seconds (ImageMagick `import -window root`), then close the app the
way a user does (focus the window, Ctrl+Q) and check that it exits with code 0. Prints every
run and the median. Needs Xvfb and xdotool (apt-get install xvfb xdotool imagemagick).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DESKTOP_FILE = Path("/usr/share/applications/chatapp.desktop")


def exec_command(desktop_file: Path) -> list[str]:
    for line in desktop_file.read_text(encoding="utf-8").splitlines():
        if line.startswith("Exec="):
            # drop field codes (%f, %U, ...) as a launcher without files would
            return [a for a in shlex.split(line[5:]) if not a.startswith("%")]
    raise SystemExit(f"no Exec= in {desktop_file}")


def start_xvfb() -> tuple[subprocess.Popen, str]:
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [
            "Xvfb",
            "-displayfd",
            str(write_fd),
            "-screen",
            "0",
            "1280x800x24",
            "-nolisten",
            "tcp",
            "-noreset",
        ],
        pass_fds=(write_fd,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        display = ":" + f.readline().strip()
    return proc, display


def find_window(env: dict[str, str]) -> str | None:
    out = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", "chatapp"],
        env=env,
        capture_output=True,
        text=True,
    ).stdout.split()
    return out[0] if out else None


def one_run(
    cmd: list[str],
    env: dict[str, str],
    settle: float,
    screenshot: Path | None,
    timeout: float,
    ready_title: str,
) -> tuple[float, float | None, str]:
    """(seconds to window shown, seconds to `ready_title` in the title or None, last title)"""
    started = time.monotonic()
    app = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    window = None
    while time.monotonic() - started < timeout:
        window = find_window(env)
        if window or app.poll() is not None:
            break
        time.sleep(0.01)
    shown = time.monotonic() - started
    if window is None:
        app.kill()
        out = app.communicate()[0].decode(errors="replace")
        raise SystemExit(f"no window within {timeout} s (exit {app.returncode}):\n{out}")

    def title_now() -> str:
        return subprocess.run(
            ["xdotool", "getwindowname", window], env=env, capture_output=True, text=True
        ).stdout.strip()

    ready = None
    if ready_title:  # the GUI puts the model's name in the title once the model is loaded
        while time.monotonic() - started < timeout and app.poll() is None:
            if ready_title in title_now():
                ready = time.monotonic() - started
                break
            time.sleep(0.01)
    time.sleep(settle)
    title = title_now()
    if screenshot is not None:
        subprocess.run(["import", "-window", "root", str(screenshot)], env=env, check=True)
    subprocess.run(["xdotool", "windowfocus", "--sync", window], env=env, check=True)
    subprocess.run(["xdotool", "key", "ctrl+q"], env=env, check=True)
    try:
        out = app.communicate(timeout=30)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        app.kill()
        raise SystemExit("the app did not exit after Ctrl+Q") from None
    if app.returncode != 0:
        raise SystemExit(f"exit code {app.returncode}:\n{out}")
    return shown, ready, title


def summary(seconds: list[float]) -> str:
    ms = [x * 1000 for x in seconds]
    median = statistics.median(ms)
    return f"median of {len(ms)}: {median:.0f} ms (min {min(ms):.0f}, max {max(ms):.0f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--settle", type=float, default=0.0, help="seconds before closing")
    p.add_argument("--screenshot", type=Path, default=None, help="PNG of the last run")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument(
        "--ready-title",
        default="SmolLM2",
        help="also time until the window title contains this (model loaded); '' = off",
    )
    p.add_argument("command", nargs="*")
    args = p.parse_args()
    cmd = args.command or exec_command(DESKTOP_FILE)
    xvfb, display = start_xvfb()
    home = tempfile.mkdtemp(prefix="chatapp-startup-")
    # a fresh user each time the script runs: HOME is new, settings/history start empty
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "DISPLAY": display}
    shown_s: list[float] = []
    ready_s: list[float] = []
    try:
        for i in range(args.runs):
            last = i == args.runs - 1
            shown, ready, title = one_run(
                cmd,
                env,
                args.settle if last else 0.0,
                args.screenshot if last else None,
                args.timeout,
                args.ready_title,
            )
            shown_s.append(shown)
            line = f"run {i + 1}: window shown after {shown * 1000:.0f} ms"
            if ready is not None:
                ready_s.append(ready)
                line += f", model loaded after {ready * 1000:.0f} ms"
            print(f"{line}; title {title!r}; exit 0", flush=True)
    finally:
        xvfb.terminate()
        xvfb.wait()
    print(f"command: {shlex.join(cmd)}")
    print(f"window shown: {summary(shown_s)}")
    if ready_s:
        print(f"model loaded: {summary(ready_s)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
