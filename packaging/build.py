"""Build the self-contained chatapp packages (`make package` runs this).

    python packaging/build.py [--skip-pyinstaller] [--no-deb] [--no-tar]

1. icons:       chatapp/resources/chatapp.svg -> build/icons (PNG sizes, .ico, .icns)
2. PyInstaller: packaging/chatapp.spec -> dist/chatapp/ (one folder; the prepared default
                model inside at _internal/models/SmolLM2-135M-Instruct-Q4_1)
3. Linux only:  dist/chatapp_<version>_<arch>.deb (dpkg-deb, no network) and
                dist/chatapp-<version>-linux-<machine>.tar.gz (the same folder)
4. build-info.json: in the app folder (version, what the frozen app supports; read by the
   smoke tests, also of an installed copy) and in dist/ (the same plus sizes).

Windows and macOS: steps 1, 2 and 4 (see packaging/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
BUILD = ROOT / "build"
DIST = ROOT / "dist"
APP_DIR = DIST / "chatapp"  # PyInstaller's COLLECT output
INSTALL_PREFIX = "/opt/chatapp"


def log(msg: str) -> None:
    print(f"build: {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    log(" ".join(str(c) for c in cmd))
    return subprocess.run(cmd, check=True, **kw)


def tree_size(path: Path) -> int:
    """Bytes of all regular files under path (symlinks not followed)."""
    total = 0
    for p in path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def version() -> str:
    sys.path.insert(0, str(ROOT))
    from chatapp import __version__

    return __version__


def make_icons() -> Path:
    out = BUILD / "icons"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    run([sys.executable, str(PACKAGING / "make_icons.py"), str(out)], env=env)
    return out


def pyinstaller() -> None:
    run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            str(PACKAGING / "chatapp.spec"),
            "--noconfirm",
            "--distpath",
            str(DIST),
            "--workpath",
            str(BUILD / "pyinstaller"),
        ],
        cwd=ROOT,
    )


def gui_supports_quit_after_ms() -> bool:
    """Whether the GUI of this source tree has the `--quit-after-ms` smoke-test option."""
    try:
        from chatapp.gui.app import parse_args

        args, _rest = parse_args(["--quit-after-ms", "1"])
        return getattr(args, "quit_after_ms", None) == 1
    except Exception:
        return False


# ------------------------------------------------------------------------------------ Linux
def strip_python(app_dir: Path) -> int:
    """Strip debug symbols from the Python runtime copied from the builder (libpython and
    lib-dynload; a pyenv/source-built Python keeps them: ~20 MB). Only these files: the wheels'
    libraries are already stripped, and some were edited by auditwheel/patchelf, which `strip`
    can break. Returns the bytes saved."""
    if shutil.which("strip") is None:
        log("strip not found (binutils): Python runtime left as it is")
        return 0
    internal = app_dir / "_internal"
    files = sorted(internal.glob("libpython*.so*")) + sorted(
        internal.glob("python3*/lib-dynload/*.so")
    )
    files = [p for p in files if p.is_file() and not p.is_symlink()]
    before = sum(p.stat().st_size for p in files)
    for p in files:
        subprocess.run(["strip", "--strip-unneeded", str(p)], check=True)
    saved = before - sum(p.stat().st_size for p in files)
    log(f"stripped {len(files)} Python runtime files: {saved / 2**20:.1f} MiB saved")
    return saved


def deb_arch() -> str:
    try:
        return subprocess.run(
            ["dpkg", "--print-architecture"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def elf_files(folder: Path) -> list[Path]:
    out = []
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            with p.open("rb") as f:
                if f.read(4) == b"\x7fELF":
                    out.append(p)
    return out


FALLBACK_DEPENDS = "libc6 (>= 2.34), libgl1, libegl1, libxcb1"
# Optional: Qt's Wayland plugin needs these; without them Qt falls back to X11 (XWayland).
RECOMMENDED = {
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
}
GLIBC_SONAMES = ("ld-linux", "libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so")


def _objdump(args: list[str], path: Path) -> str:
    return subprocess.run(
        ["objdump", *args, str(path)], capture_output=True, text=True, check=False
    ).stdout


def _soname_paths() -> dict[str, str]:
    """SONAME -> path of the builder's own copy, native architecture first (ldconfig -p)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    native = f"{platform.machine()}-linux-gnu"
    paths: dict[str, str] = {}
    for line in out.splitlines():
        if "=>" not in line:
            continue
        name = line.split()[0]
        path = line.split("=>", 1)[1].strip()
        if name not in paths or (native in path and native not in paths[name]):
            paths[name] = path
    return paths


def _owning_package(path: str) -> str | None:
    candidates = [path, os.path.realpath(path)]
    for c in list(candidates):  # merged /usr: dpkg may know either spelling
        if c.startswith("/usr/lib/"):
            candidates.append(c[len("/usr") :])
        elif c.startswith("/lib/"):
            candidates.append("/usr" + c)
    for c in candidates:
        r = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout:
            return r.stdout.split(":", 1)[0].strip()
    return None


def system_depends(app_dir: Path) -> tuple[str, str]:
    """(Depends, Recommends) for the system libraries the bundle links to but does not carry.

    PyInstaller bundles every library except glibc and the graphics stack (GL/EGL, libxcb,
    Wayland), so those are what the package must depend on: NEEDED entries of all bundled ELF
    files minus the bundled file names, mapped to packages with `dpkg -S`, and libc6 versioned
    by the newest GLIBC_x.y symbol version any file asks for."""
    if shutil.which("objdump") is None or shutil.which("dpkg") is None:
        log("objdump/dpkg not found: using a fixed Depends list")
        return FALLBACK_DEPENDS, ""
    files = elf_files(app_dir)
    bundled = {p.name for p in app_dir.rglob("*")}
    needed: set[str] = set()
    glibc = (2, 17)
    for f in files:
        for line in _objdump(["-p"], f).splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "NEEDED":
                needed.add(parts[1])
        for v in set(re.findall(r"GLIBC_(\d+)\.(\d+)", _objdump(["-T"], f))):
            glibc = max(glibc, (int(v[0]), int(v[1])))
    external = sorted(needed - bundled)
    paths = _soname_paths()
    depends = {f"libc6 (>= {glibc[0]}.{glibc[1]})"}
    recommends: set[str] = set()
    for soname in external:
        if soname.startswith(GLIBC_SONAMES):
            continue
        if soname in RECOMMENDED:
            recommends.add(RECOMMENDED[soname])
            continue
        pkg = _owning_package(paths[soname]) if soname in paths else None
        if pkg is None:
            log(f"warning: no package found on this machine for {soname}")
            continue
        depends.add(pkg)
    log(f"system libraries used, not bundled: {', '.join(external)}")
    return ", ".join(sorted(depends)), ", ".join(sorted(recommends))


def build_deb(app_dir: Path, icons: Path, ver: str, compression: str = "xz") -> Path:
    arch = deb_arch()
    stage = BUILD / "deb" / f"chatapp_{ver}_{arch}"
    shutil.rmtree(stage, ignore_errors=True)
    opt = stage / INSTALL_PREFIX.lstrip("/")
    shutil.copytree(app_dir, opt, symlinks=True)
    # the command on the PATH: a symlink (the bootloader finds its folder via /proc/self/exe)
    (stage / "usr" / "bin").mkdir(parents=True)
    os.symlink(f"{INSTALL_PREFIX}/chatapp", stage / "usr" / "bin" / "chatapp")
    apps = stage / "usr" / "share" / "applications"
    apps.mkdir(parents=True)
    shutil.copy2(PACKAGING / "linux" / "chatapp.desktop", apps / "chatapp.desktop")
    shutil.copytree(icons / "hicolor", stage / "usr" / "share" / "icons" / "hicolor")
    doc = stage / "usr" / "share" / "doc" / "chatapp"
    doc.mkdir(parents=True)
    shutil.copy2(PACKAGING / "linux" / "copyright", doc / "copyright")
    # permissions as dpkg expects them, whatever the umask of the builder
    for p in stage.rglob("*"):
        if p.is_symlink():
            continue
        if p.is_dir() or (os.access(p, os.X_OK) and p.suffix not in (".py", ".json", ".txt")):
            p.chmod(0o755)
        else:
            p.chmod(0o644)
    stage.chmod(0o755)
    installed_kib = (tree_size(stage) + 1023) // 1024
    depends, recommends = system_depends(app_dir)
    control = (PACKAGING / "linux" / "control.in").read_text(encoding="utf-8")
    control = (
        control.replace("@VERSION@", ver)
        .replace("@ARCH@", arch)
        .replace("@INSTALLED_SIZE@", str(installed_kib))
        .replace("@DEPENDS@", depends)
    )
    if recommends:
        control = control.replace("Depends:", f"Recommends: {recommends}\nDepends:", 1)
    (stage / "DEBIAN").mkdir(mode=0o755)
    (stage / "DEBIAN" / "control").write_text(control, encoding="utf-8")
    deb = DIST / f"chatapp_{ver}_{arch}.deb"
    deb.unlink(missing_ok=True)
    # xz (default): smallest, and every dpkg since Debian 7 / Ubuntu 12.04 reads it, but takes
    # ~3 min here; gzip: ~20% bigger, much faster (for quick local iterations)
    run(["dpkg-deb", "--root-owner-group", f"-Z{compression}", "--build", str(stage), str(deb)])
    return deb


def build_tar(app_dir: Path, ver: str) -> Path:
    name = f"chatapp-{ver}-linux-{platform.machine()}"
    out = DIST / f"{name}.tar.gz"
    out.unlink(missing_ok=True)

    def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    log(f"tar {out.name}")
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(app_dir, arcname=name, filter=reset)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-pyinstaller", action="store_true", help="reuse dist/chatapp")
    parser.add_argument("--no-deb", action="store_true")
    parser.add_argument("--no-tar", action="store_true")
    parser.add_argument("--deb-compression", choices=("xz", "gzip", "zstd"), default="xz")
    args = parser.parse_args()
    started = time.monotonic()
    ver = version()
    icons = make_icons()
    if not args.skip_pyinstaller:
        pyinstaller()
    app_dir = APP_DIR
    if sys.platform == "darwin":
        app_dir = DIST / "chatapp.app"
    if not app_dir.exists():
        log(f"{app_dir} is missing")
        return 1
    stripped = 0
    if sys.platform.startswith("linux") and os.environ.get("CHATAPP_NO_STRIP") != "1":
        stripped = strip_python(app_dir)
    # inside the folder (so also in the .deb/.tar.gz): what this build's app supports, for the
    # smoke tests of an installed copy (tests/packaging)
    bundle_info = {
        "version": ver,
        "gui_quit_after_ms": gui_supports_quit_after_ms(),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (APP_DIR if APP_DIR.is_dir() else app_dir).joinpath("build-info.json").write_text(
        json.dumps(bundle_info, indent=2) + "\n", encoding="utf-8"
    )
    info: dict = {
        "version": ver,
        "platform": sys.platform,
        "machine": platform.machine(),
        "app_dir": str(app_dir.relative_to(ROOT)),
        "app_bytes": tree_size(app_dir),
        "gui_quit_after_ms": bundle_info["gui_quit_after_ms"],
        "spec_keep": os.environ.get("CHATAPP_SPEC_KEEP", ""),
        "stripped_bytes": stripped,
        "files": {},
    }
    if sys.platform.startswith("linux"):
        outputs = []
        if not args.no_deb:
            outputs.append(build_deb(app_dir, icons, ver, args.deb_compression))
        if not args.no_tar:
            outputs.append(build_tar(app_dir, ver))
        for p in outputs:
            info["files"][p.name] = p.stat().st_size
    (DIST / "build-info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    mib = 1024 * 1024
    log(f"{app_dir.relative_to(ROOT)}: {info['app_bytes'] / mib:.1f} MiB")
    for name, size in info["files"].items():
        log(f"dist/{name}: {size / mib:.1f} MiB")
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
