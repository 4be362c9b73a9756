"""Render chatapp/resources/chatapp.svg into the icon files the packages need.

    python packaging/make_icons.py OUT_DIR

writes OUT_DIR/hicolor/<N>x<N>/apps/chatapp.png (freedesktop sizes), OUT_DIR/chatapp.png
(256 px), OUT_DIR/chatapp.ico (Windows executable) and OUT_DIR/chatapp.icns (macOS bundle).
Uses Qt's own SVG renderer and image writers (PySide6 is in the build venv anyway), offscreen,
so no ImageMagick/Inkscape/Pillow is needed on any platform.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "chatapp" / "resources" / "chatapp.svg"
HICOLOR_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "build" / "icons"
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        print(f"make_icons: cannot read {SVG}", file=sys.stderr)
        return 1

    def render(size: int) -> QImage:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        return image

    written = []
    for size in HICOLOR_SIZES:
        path = out / "hicolor" / f"{size}x{size}" / "apps" / "chatapp.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not render(size).save(str(path), "PNG"):
            print(f"make_icons: cannot write {path}", file=sys.stderr)
            return 1
        written.append(path)
    scalable = out / "hicolor" / "scalable" / "apps" / "chatapp.svg"
    scalable.parent.mkdir(parents=True, exist_ok=True)
    scalable.write_bytes(SVG.read_bytes())
    written.append(scalable)
    for name, size, fmt in (
        ("chatapp.png", 256, "PNG"),
        ("chatapp.ico", 256, "ICO"),
        ("chatapp.icns", 512, "ICNS"),
    ):
        path = out / name
        if render(size).save(str(path), fmt):
            written.append(path)
        else:  # the ico/icns writers are Qt image-format plugins; PNG is what Linux needs
            print(f"make_icons: no {fmt} writer here, skipped {path.name}", file=sys.stderr)
    del app
    print(f"make_icons: {len(written)} files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
