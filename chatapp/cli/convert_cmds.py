"""`chatapp convert` and `chatapp prepare`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chatapp.cli.errors import terminate_as_interrupt
from chatapp.cli.progress import ProgressBar
from chatapp.convert.converter import GRAPHS, ConvertOptions, convert_gguf
from chatapp.convert.needs import Preflight
from chatapp.session import arg_checks as checks


def add_parsers(sub: argparse._SubParsersAction) -> None:
    conv = sub.add_parser(
        "convert", help="convert a Llama, Qwen, Gemma or Phi GGUF file to a model folder"
    )
    conv.add_argument("gguf", type=Path, help="the .gguf file")
    conv.add_argument("out_dir", type=Path, help="the model folder to create")
    conv.add_argument(
        "--context",
        type=checks.whole(1, checks.MAX_CONTEXT, "a context length"),
        default=None,
        help="context length of the model folder (default: the file's, at most 32768)",
    )
    conv.add_argument(
        "--accuracy-level",
        type=int,
        choices=(0, 1, 4),
        default=0,
        help="MatMulNBits accuracy level of the layers: 0 float (exact), 4 int8",
    )
    conv.add_argument(
        "--lm-head",
        choices=("float", "int8"),
        default="float",
        help="output projection: float MatMul (exact, default) or 8-bit MatMulNBits, int8 input",
    )
    conv.add_argument(
        "--int8-levels",
        choices=("decode", "all", "head"),
        default="decode",
        help="exact int8 levels (activations split into int8 rows, docs/converter.md): in "
        "single-token steps of every layer, prompts on the float kernel (default); in every "
        "run (long prompts ~2.8x slower); or in the output projection only",
    )
    conv.add_argument(
        "--attention",
        choices=("gqa", "standard"),
        default="gqa",
        help="gqa: GroupQueryAttention, one shared KV buffer (default); "
        "standard: plain ONNX ops with a concatenated KV cache (Optimum's form)",
    )
    conv.add_argument(
        "--kv-layout",
        choices=("dynamic", "static"),
        default="dynamic",
        help="static: fixed shapes (past C-W, present C), needs --context",
    )
    conv.add_argument(
        "--window",
        type=checks.whole(1, checks.MAX_CONTEXT, "a token count"),
        default=1,
        help="static layout: tokens per run (default 1)",
    )
    conv.add_argument(
        "--graph",
        choices=GRAPHS,
        default="auto",
        help="native: projections as their raw GGUF blocks on chatapp's GGUF kernels (CPU "
        "only, needs `make native`; about the GGUF's size); stock: ONNX Runtime's operators "
        "(every device); both: stock model.onnx and native model_gguf.onnx; auto (default): "
        "native where the kernels run here, else stock",
    )
    conv.add_argument(
        "--native",
        dest="graph",
        action="store_const",
        const="native",
        help="the same as --graph native",
    )
    conv.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    conv.set_defaults(func=run_convert)

    prep = sub.add_parser("prepare", help="convert the bundled default model once (offline)")
    prep.set_defaults(func=run_prepare)


def run_convert(args: argparse.Namespace) -> int:
    opts = ConvertOptions(
        context_length=args.context,
        accuracy_level=args.accuracy_level,
        lm_head_int8=args.lm_head == "int8",
        int8_levels=args.int8_levels,
        attention="standard" if args.kv_layout == "static" else args.attention,
        kv_layout=args.kv_layout,
        window=args.window,
        overwrite=args.force,
        graph=args.graph,
    ).resolved()
    if not args.force:
        from chatapp.convert.converter import earlier_conversion

        earlier = earlier_conversion(args.gguf, args.out_dir, opts)
        if earlier is not None:
            where = "" if earlier == args.out_dir else f" (not copied again into {args.out_dir})"
            print(
                f"chatapp: {args.gguf.name} is already converted with these options in "
                f"{earlier}{where}; --force converts it again.",
                file=sys.stderr,
            )
            print(earlier)
            return 0
    print(convert_file(args.gguf, args.out_dir, opts))
    return 0


def convert_file(gguf: Path, out_dir: Path, opts: ConvertOptions) -> Path:
    """Convert with the plan and a progress bar on stderr, then prepare the folder's packed
    copy; returns the folder (`chatapp convert`, `chatapp pull`)."""
    bar = ProgressBar("convert")

    def say_needs(plan: Preflight) -> None:
        # What the folder and the conversion take, before the bar: the window shows the same.
        print(f"chatapp: {plan.line(gguf.name)}", file=sys.stderr, flush=True)

    from chatapp.engine.errors import EngineError
    from chatapp.engine.model_description import read_model
    from chatapp.engine.packed_cache import prepare_folder

    with terminate_as_interrupt():  # SIGTERM removes the .partial folder as Ctrl+C does
        try:
            out = convert_gguf(gguf, out_dir, opts, bar, preflight=say_needs)
        finally:
            bar.close()
        # A big model's first load then maps this copy instead of packing it (docs/converter.md).
        try:
            model = read_model(out)
        except (EngineError, OSError):  # opening it says why
            model = None
        if model is not None:
            prepare_folder(
                model, say=lambda line: print(f"chatapp: {line}", file=sys.stderr, flush=True)
            )
    return out


def run_prepare(_args: argparse.Namespace) -> int:
    from chatapp.convert.default_model import prepare_default_model

    bar = ProgressBar("prepare")
    with terminate_as_interrupt():
        try:
            folder, converted = prepare_default_model(bar)
        finally:
            bar.close()
    if not converted:
        print("default model is ready (verified)")
    print(folder)
    return 0
