"""`chatapp devices | generate | bench | variants`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatapp.cli.errors import UserError
from chatapp.cli.fidelity_cmd import add_fidelity_args, run_fidelity_bench
from chatapp.cli.tool_args import add_tool_args, calls_as_json, calls_text, tools_from_args
from chatapp.engine.guards import PRECISION_LABELS, PRECISIONS, default_precision
from chatapp.engine.modes import CACHED_MODES, MODES, Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.structured.constraints import MAX_SCHEMA_CHARS, ConstraintError, OutputFormat
from chatapp.json_text import JsonTextError, parse_json_text
from chatapp.session import arg_checks as checks
from chatapp.session import formatting

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine

NEW_TOKENS = checks.whole(1, checks.MAX_NEW_TOKENS, "a token count")
MAX_SLOTS = 16  # as `chatapp serve --parallel`


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        type=Path,
        default=None,
        help="model folder (default: the prepared default model)",
    )
    add_onnx_file_arg(p)
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda, webgpu, webgpu-software, dml, coreml, openvino (see `chatapp devices`)",
    )
    p.add_argument(
        "--threads",
        type=checks.threads,
        default=None,
        help=f"intra-op threads (default: cores; at most {checks.THREADS_PER_CPU} per CPU)",
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=default_precision(),
        help="how the GGUF kernels multiply: fast (8-bit activations, as llama.cpp; the default, "
        "or what CHATAPP_GGUF_PRECISION names) or exact (float32 prompts, int16 decode steps: "
        "closer to the float model, slower); docs/engine.md",
    )
    p.add_argument(
        "--context",
        type=checks.whole(1, checks.MAX_CONTEXT, "a context length"),
        default=None,
        help="KV cache length to allocate (default: model's, at most 8192)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def add_onnx_file_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--onnx-file",
        type=checks.onnx_file,
        default=None,
        metavar="NAME",
        help="which graph of the folder, e.g. onnx/model_q4.onnx (default: the most precise one "
        "that runs; see `chatapp variants`)",
    )


def add_parsers(sub: argparse._SubParsersAction) -> None:
    dev = sub.add_parser("devices", help="list the devices onnxruntime offers here")
    dev.add_argument("--json", action="store_true")
    dev.set_defaults(func=run_devices)

    gen = sub.add_parser("generate", help="answer one prompt and print the figures")
    add_model_args(gen)
    gen.add_argument("--mode", choices=MODES, default=Mode.IOBINDING)
    gen.add_argument("--prompt", type=checks.text, required=True)
    gen.add_argument("--system", type=checks.text, default=None, help="system prompt")
    gen.add_argument("--raw", action="store_true", help="no chat template: continue the text")
    gen.add_argument("--max-new-tokens", type=NEW_TOKENS, default=128)
    greedy = gen.add_mutually_exclusive_group()
    greedy.add_argument(
        "--greedy",
        action="store_true",
        help="always the most likely token: the window's Precise preset (repetition penalty "
        "1.1 kept; --repetition-penalty 1 turns it off)",
    )
    greedy.add_argument(
        "--temperature", type=checks.number(0, checks.MAX_TEMPERATURE), default=None
    )
    gen.add_argument(
        "--top-k", type=checks.whole(0, 1 << 24, "a token count"), default=None, help="default 40"
    )
    gen.add_argument(
        "--top-p", type=checks.number(0, 1, low_open=True), default=None, help="default 0.95"
    )
    gen.add_argument(
        "--repetition-penalty",
        type=checks.number(0, checks.MAX_PENALTY, low_open=True),
        default=None,
        help="makes tokens already in the prompt or the answer less likely (1: off; default 1.1)",
    )
    gen.add_argument("--seed", type=checks.whole(0, checks.MAX_SEED, "a seed"), default=None)
    gen.add_argument(
        "--stop",
        type=checks.text,
        action="append",
        default=[],
        metavar="TEXT",
        help="end the answer before this text, not printed (repeatable)",
    )
    shape = gen.add_mutually_exclusive_group()
    shape.add_argument(
        "--json-schema",
        type=Path,
        default=None,
        metavar="FILE",
        help="the answer must be JSON matching this JSON schema (constrained decoding)",
    )
    shape.add_argument(
        "--json-object", action="store_true", help="the answer must be a JSON object"
    )
    add_tool_args(gen)
    gen.add_argument(
        "--speculative",
        action="store_true",
        help="draft tokens from the conversation and verify several per step (same answer; "
        "faster where the answer repeats the prompt; GGUF kernels, fast precision)",
    )
    gen.set_defaults(func=run_generate)

    var = sub.add_parser("variants", help="the ONNX graphs of a model folder: precision, size")
    var.add_argument("--model", type=Path, default=None, help="model folder")
    var.add_argument("--json", action="store_true", help="print JSON instead of text")
    var.set_defaults(func=run_variants)

    bench = sub.add_parser("bench", help="the loops on one prompt: medians and a table")
    add_model_args(bench)
    bench.add_argument(
        "--prompt", type=checks.text, default="Explain what a KV cache is in a few sentences."
    )
    bench.add_argument("--max-new-tokens", type=NEW_TOKENS, default=128)
    bench.add_argument(
        "--modes",
        type=checks.modes,
        default=CACHED_MODES,
        help="the loops to run, comma-separated: nocache, naive, iobinding (default: "
        "naive,iobinding; nocache's time per token grows with the length)",
    )
    bench.add_argument(
        "--repeats", type=checks.whole(1, checks.MAX_REPEATS, "a repeat count"), default=3
    )
    bench.add_argument(
        "--context-tokens",
        type=checks.whole(1, checks.MAX_CONTEXT, "a token count"),
        default=None,
        help="pad the prompt with real text to about this many tokens",
    )
    bench.add_argument(
        "--peer",
        type=checks.peers,
        default="",
        help="also measure other systems beside each repeat: genai (onnxruntime-genai on the "
        "same folder), llamacpp (llama.cpp on the same GGUF, its own process); comma-separated",
    )
    bench.add_argument(
        "--peer-gguf",
        type=Path,
        default=None,
        help="the GGUF the folder was converted from: llama.cpp runs it, --fidelity's float64 "
        "reference reads it (default: the bundled one, for the default model)",
    )
    bench.add_argument(
        "--peer-python", default=None, help="a Python that has llama-cpp-python (default: this)"
    )
    bench.add_argument(
        "--no-floor",
        action="store_true",
        help="skip measuring read bandwidth for the physical floor (tokens/s ceiling)",
    )
    bench.add_argument(
        "--sweep",
        type=checks.sweep,
        default=None,
        help="comma-separated context lengths, e.g. 128,512,1024,2048",
    )
    bench.add_argument(
        "--parallel",
        type=checks.whole(2, MAX_SLOTS, "a number of clients"),
        default=None,
        metavar="N",
        help="instead of the loops: one client alone against N decoded together (the "
        "slots of `chatapp serve --parallel N`), every answer --max-new-tokens long",
    )
    bench.add_argument(
        "--speculative",
        action="store_true",
        help="instead of the loops: plain against speculative decoding on the prompts of "
        "chatapp/resources/speculative_prompts.json, greedy, interleaved; --peer llamacpp "
        "adds llama.cpp's plain decode of the same prompts to each repeat",
    )
    add_fidelity_args(bench)
    bench.add_argument(
        "--report",
        type=Path,
        default=None,
        help="write charts, JSON and a Markdown report into this folder",
    )
    bench.set_defaults(func=run_bench)


def resolve_model(path: Path | None) -> Path:
    if path is not None:
        return path  # the engine says what is wrong with it (missing, a file, ...)
    from chatapp.convert.default_model import default_model_dir

    folder = default_model_dir()
    if not folder.is_dir():
        raise UserError("The default model is not prepared yet: run `chatapp prepare` first.")
    return folder


def run_devices(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    from chatapp.engine.devices import (
        DeviceError,
        available_devices,
        find_device,
        unavailable_reasons,
    )

    devices = available_devices(offers=True)
    reasons = unavailable_reasons()
    for offer in [d for d in devices if d.on_request]:
        try:  # this command is where a user asks: try what the window only offers
            find_device(offer.name)
        except DeviceError as exc:
            devices.remove(offer)
            reasons[offer.name] = exc.reason
    if args.json:
        listed = [
            {
                "name": d.name,
                "provider": d.provider,
                "ortvalue_device": d.ortvalue_device,
                "label": d.label,
                "own_memory": d.own_memory,
                "software": d.software,
                "on_request": d.on_request,
            }
            for d in devices
        ]
        out = {"onnxruntime": ort.__version__, "devices": listed, "unavailable": reasons}
        print(json.dumps(out, indent=2))
        return 0
    print(f"onnxruntime {ort.__version__}")
    for d in devices:
        memory = "own memory" if d.own_memory else "host memory"
        note = "  (started only when named: --device " + d.name + ")" if d.on_request else ""
        print(f"{d.name:16} {d.label}  [{memory}]{note}")
    for name, reason in reasons.items():
        print(f"{name:16} not available: {reason}")
    return 0


def sampling_from_args(args: argparse.Namespace) -> SamplingSettings:
    """--greedy is the window's Precise preset (its repetition penalty kept); values named
    on the command line go over it, as the window's own values go over a preset."""
    from chatapp.engine.sampling import chosen_sampling

    named = {
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "repetition_penalty": args.repetition_penalty,
    }
    chosen = {name: value for name, value in named.items() if value is not None}
    return chosen_sampling(
        "precise" if args.greedy else None,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        **chosen,
    )


def start_engine(args: argparse.Namespace, mode: Mode | None = None) -> Engine:
    """The engine `add_model_args`' options ask for (`mode`: its loop where the command has no
    --mode); a fall-back to the CPU is said on stderr."""
    from chatapp.engine.engine import Engine

    engine = Engine(
        resolve_model(args.model),
        args.device,
        mode or args.mode,
        args.threads,
        args.context,
        onnx_file=args.onnx_file,
        precision=args.precision,
    )
    if engine.fallback_reason:
        print(f"chatapp: {engine.fallback_reason}", file=sys.stderr)
    return engine


def output_format_from_args(args: argparse.Namespace) -> OutputFormat | None:
    """--json-object / --json-schema FILE; a file that is not a JSON schema says so in a line."""
    if args.json_object:
        return OutputFormat.json_object()
    path: Path | None = args.json_schema
    if path is None:
        return None
    try:
        if not path.is_file():
            raise UserError(f"--json-schema: {path} is not a file.")
        if path.stat().st_size > 4 * MAX_SCHEMA_CHARS:
            raise UserError(f"--json-schema: {path} is larger than {4 * MAX_SCHEMA_CHARS} bytes.")
        schema = parse_json_text(path.read_text(encoding="utf-8"))
        return OutputFormat.json_schema(schema)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--json-schema: {path} cannot be read ({exc}).") from exc
    except JsonTextError as exc:
        raise UserError(f"--json-schema: {path} {exc}.") from None
    except RecursionError:  # a schema that parses but is too deep for its checks
        raise UserError(f"--json-schema: {path} is nested too deeply.") from None
    except ConstraintError as exc:
        raise UserError(f"--json-schema: {exc}") from exc


def run_generate(args: argparse.Namespace) -> int:
    from chatapp.engine.text.chat import Message
    from chatapp.session.answer import AnswerDone, AnswerRequest, TextDelta, answer
    from chatapp.session.engine_service import stream

    settings = sampling_from_args(args)
    try:
        settings.validate()
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    if args.raw and not args.prompt:
        raise UserError("--raw needs a prompt to continue; --prompt is empty.")
    output_format = output_format_from_args(args)
    tools, tool_choice = tools_from_args(args)
    engine = start_engine(args)
    engine.speculative = args.speculative
    if args.speculative and (refusal := engine.speculation_refusal()):
        print(f"chatapp: speculative decoding is off: {refusal}.", file=sys.stderr)
    if engine.tokenizer.notice and not args.raw:
        print(f"chatapp: {engine.tokenizer.notice}", file=sys.stderr)
    messages = [Message("system", args.system)] if args.system and not args.raw else []
    request = AnswerRequest(
        (*messages, Message("user", args.prompt)),
        settings,
        args.mode,
        text=args.prompt if args.raw else None,
        text_by_person=True,
        output_format=output_format,
        tools=tools,
        tool_choice=tool_choice,
        stops=tuple(s for s in args.stop if s),
    )
    done: AnswerDone | None = None
    try:  # the window's and the server's path (session/answer.py), on an engine service
        for event in stream("generation", lambda stop: answer(engine, request, stop)):
            if isinstance(event, TextDelta) and not args.json:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, AnswerDone):
                done = event
    except ConstraintError as exc:  # refused at the start, or failed mid-answer: one line
        raise UserError(str(exc)) from exc
    assert done is not None  # answer() ends with its AnswerDone
    stats = done.stats
    if args.json:
        out: dict[str, Any] = {"text": done.text, **stats.to_dict(), "finish": done.finish.value}
        if tools:
            out["tool_calls"] = calls_as_json(done.tool_calls)
        out["device"] = engine.device.name
        out["onnx_file"] = engine.info.onnx_file
        out["kernels"] = engine.kernels  # GGUF kernels or ORT's
        out["precision"] = engine.precision_in_effect  # None: no GGUF kernels, no such choice
        out["fallback_reason"] = engine.fallback_reason
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print()
        if done.tool_calls:
            print(calls_text(done.tool_calls))
        precision = engine.precision_in_effect
        named = f", {PRECISION_LABELS[precision]}" if precision else ""
        if stats.drafted:
            named += (
                f", speculative: {sum(stats.accepted)} of {sum(stats.drafted)} drafted tokens "
                f"kept, {stats.runs} runs for {len(stats.latencies_s)} tokens"
            )
        print(
            f"[{stats.mode} on {stats.device}{named}: {stats.generated_tokens} tokens, "
            f"{stats.tokens_per_s:.1f} tok/s, TTFT {stats.ttft_s * 1000:.0f} ms, "
            f"perplexity {formatting.perplexity(stats.perplexity)}, finish: {done.finish}]",
            file=sys.stderr,
        )
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """Every measurement runs as a job on an engine service (cli/bench_modes.py)."""
    from chatapp.cli import bench_modes

    if args.parallel is not None or args.speculative:
        bench_modes.measured_alone(args, "--parallel" if args.parallel else "--speculative")
        engine = start_engine(args, Mode.IOBINDING)
        if args.parallel:
            return bench_modes.run_parallel_bench(args, engine)
        return bench_modes.run_speculative_bench(args, engine)
    if args.fidelity:
        return run_fidelity_bench(args, resolve_model(args.model))
    return bench_modes.run_suite(args, resolve_model(args.model))


def run_variants(args: argparse.Namespace) -> int:
    from chatapp.engine.model_folder.variants import folder_variants

    folder = resolve_model(args.model)
    if not folder.is_dir():
        if folder.exists():
            raise UserError(f"{folder} is a file, not a model folder.")
        raise UserError(f"The model folder {folder} does not exist.")
    statuses = folder_variants(folder)
    if args.json:
        rows = [
            {
                "onnx_file": s.variant.path,
                "precision": s.variant.precision,
                "name_precision": s.variant.name_precision,
                "size_bytes": s.variant.size_bytes,
                "default": s.default,
                "problem": s.problem,
            }
            for s in statuses
        ]
        print(json.dumps({"model_dir": str(folder), "variants": rows}, indent=2))
        return 0
    if not statuses:
        print(f"{folder.name} holds no ONNX graph.")
    for s in statuses:
        mark = "*" if s.default else " "
        size = f"{s.variant.size_bytes / 2**20:8.1f} MiB"
        line = f"{mark} {s.variant.path:40} {s.variant.precision:6} {size}"
        print(line + (f"  cannot run: {s.problem}" if s.problem else ""))
    return 0
