"""Build the committed ONNX model-folder fixtures with the real tools (not run by `make test`).

Tiny random-weight Llama and Qwen2 models are made with transformers (from a config, never from a
hub), then written out the ways other tools write model folders:

- Optimum's exporter (`optimum.exporters.onnx.main_export`, task text-generation-with-past): a
  plain `model.onnx`, the same with external data, an fp16 export (a bf16 one is tried and
  skipped when the exporter fails, as it does with torch 2.13), and the legacy layout
  (`decoder_model.onnx` + `decoder_with_past_model.onnx` merged by Optimum into
  `decoder_model_merged.onnx` with its `use_cache_branch` input);
- onnx-community style variants in `onnx/` made from Optimum's fp32 graph with the quantizers
  transformers.js uses: fp16 (onnxruntime's float16 converter, float16 inputs and outputs),
  q4 (MatMulNBits), q8 / int8 (dynamic quantization) and q4f16;
- onnxruntime-genai's model builder (`python -m onnxruntime_genai.models.builder`, CPU, int4 and
  fp32).

Beside each folder, `expected.json` holds the greedy tokens the tool's own runtime generates for a
fixed prompt of ids: Optimum's `ORTModelForCausalLM.generate` for Optimum / onnx-community folders,
onnxruntime-genai's `Generator` for builder folders. Only for float graphs: a graph whose
activations are quantized to int8 at run time sums them differently on each instruction set, so
its entry says why it has no tokens, and the test computes them on the machine it runs on
(tests/engine/ort_reference.py). The file's "why" gives the smallest top-2 margin of the stored
tokens. tests/engine/test_tool_folders.py runs every fixture in every loop and compares.

The builder needs transformers 5.x and optimum-onnx needs transformers < 4.58, so the stages run in
two virtual environments, made once (outside the repository):

    python3 -m venv /work/venvs/optimum-export
    /work/venvs/optimum-export/bin/pip install torch optimum-onnx 'transformers<4.58' \\
        onnxruntime onnx onnx_ir accelerate tokenizers
    python3 -m venv /work/venvs/genai-builder
    /work/venvs/genai-builder/bin/pip install torch 'transformers>=5' onnxruntime-genai \\
        onnxruntime onnx onnx_ir tokenizers
    python scripts/make_onnx_fixtures.py --optimum-venv /work/venvs/optimum-export \\
        --genai-venv /work/venvs/genai-builder

(torch's CPU-only wheel is enough: `--index-url https://download.pytorch.org/whl/cpu`;
accelerate in the Optimum venv lets the exporter keep tied embeddings as one tensor.) The builder's
bf16 precision is not used: it targets CUDA, and onnxruntime's CPU provider cannot load its graph.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "onnx_folders"
PROMPT_IDS = [5, 77, 130, 9, 44, 200, 17, 88]
NEW_TOKENS = 24
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 320
CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Small but not degenerate: two layers, grouped-query attention (4 query heads, 2 KV heads of 16),
# and weights large enough that greedy choices are not near-ties (default init gives ~uniform
# logits, where any rounding difference flips a token).
DIMS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "initializer_range": 0.25,
    "tie_word_embeddings": True,  # as small models often are (SmolLM2, Qwen2.5-0.5B)
}
ARCHS = ("llama", "qwen2")


# -- stage "hf" (optimum venv): tokenizer and random-weight models ------------------------------
def train_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    text = (ROOT / "chatapp" / "resources" / "bench_text.md").read_text(encoding="utf-8")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text.splitlines(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHATML
    fast.save_pretrained(folder)


def make_hf_models(work: Path) -> None:
    import torch
    from transformers import (
        AutoTokenizer,
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    for arch in ARCHS:
        folder = work / "hf" / arch
        folder.mkdir(parents=True, exist_ok=True)
        train_tokenizer(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        ids = {"bos_token_id": 0, "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>")}
        torch.manual_seed(1234 if arch == "llama" else 4321)
        if arch == "llama":
            config = LlamaConfig(vocab_size=len(tok), **DIMS, **ids, pad_token_id=0)
            model = LlamaForCausalLM(config)
        else:
            config = Qwen2Config(vocab_size=len(tok), **DIMS, **ids, pad_token_id=0)
            model = Qwen2ForCausalLM(config)
        model.eval()
        model.generation_config = GenerationConfig(**ids, pad_token_id=0)
        model.save_pretrained(folder, safe_serialization=True)
        print(
            f"hf/{arch}: {sum(p.numel() for p in model.parameters())} parameters, vocab {len(tok)}"
        )


# -- stage "optimum" (optimum venv) ---------------------------------------------------------------
def copy_hf_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in (
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
    ):
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)


def optimum_export(src: Path, out: Path, **kwargs: Any) -> None:
    from optimum.exporters.onnx import main_export

    main_export(
        str(src),
        str(out),
        task="text-generation-with-past",
        local_files_only=True,
        do_validation=False,
        **kwargs,
    )
    copy_hf_files(src, out)


def legacy_export(src: Path, out: Path) -> None:
    """decoder_model + decoder_with_past_model, merged by Optimum (what `--legacy` used to do)."""
    from optimum.exporters.onnx import export_models
    from optimum.exporters.tasks import TasksManager
    from optimum.onnx import merge_decoders
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src)
    constructor = TasksManager.get_exporter_config_constructor(
        "onnx", model=model, task="text-generation-with-past"
    )
    configs = {
        "decoder_model": (
            model,
            constructor(
                model.config, task="text-generation", use_past=True, use_past_in_inputs=False
            ),
        ),
        "decoder_with_past_model": (
            model,
            constructor(
                model.config, task="text-generation", use_past=True, use_past_in_inputs=True
            ),
        ),
    }
    out.mkdir(parents=True, exist_ok=True)
    export_models(configs, out, output_names=[f"{name}.onnx" for name in configs])
    merge_decoders(
        out / "decoder_model.onnx",
        out / "decoder_with_past_model.onnx",
        save_path=out / "decoder_model_merged.onnx",
    )
    copy_hf_files(src, out)


def fp16(model: Any) -> Any:
    # Float16 inputs and outputs (KV and logits), as onnx-community's model_fp16 files have.
    # onnxruntime's copy of the converter: onnxconverter-common 1.16's leaves a float Cast
    # feeding float16 nodes in Llama's RMSNorm, which onnxruntime refuses to load.
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(model, keep_io_types=False)


def q4(model: Any) -> Any:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
    quantizer.process()
    return quantizer.model.model


def q8(model: Any, path: Path) -> None:
    """transformers.js's "q8" (model_quantized): int8 weights for a model without Conv / GQA."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = path.with_suffix(".in.onnx")
    import onnx

    onnx.save(model, str(tmp))
    quantize_dynamic(
        str(tmp),
        str(path),
        weight_type=QuantType.QInt8,
        extra_options={"MatMulConstBOnly": True, "EnableSubgraph": True},
    )
    tmp.unlink()


def community_variants(src_onnx: Path, hf: Path, out: Path) -> None:
    """onnx/model*.onnx as transformers.js's quantizer names them."""
    import onnx

    copy_hf_files(hf, out)
    sub = out / "onnx"
    sub.mkdir(parents=True, exist_ok=True)
    shutil.copy(src_onnx, sub / "model.onnx")
    onnx.save(fp16(onnx.load(str(src_onnx))), str(sub / "model_fp16.onnx"))
    onnx.save(q4(onnx.load(str(src_onnx))), str(sub / "model_q4.onnx"))
    onnx.save(fp16(q4(onnx.load(str(src_onnx)))), str(sub / "model_q4f16.onnx"))
    q8(onnx.load(str(src_onnx)), sub / "model_quantized.onnx")


def optimum_tokens(folder: Path, file_name: str) -> list[int] | str:
    """Greedy tokens from Optimum's own runtime, or why it could not run the file."""
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    path = Path(file_name)
    try:
        model = ORTModelForCausalLM.from_pretrained(
            folder,
            subfolder=str(path.parent) if str(path.parent) != "." else "",
            file_name=path.name,
            use_cache=True,
            use_io_binding=False,
            local_files_only=True,
            provider="CPUExecutionProvider",
        )
    except Exception as exc:  # recorded: the tests then expect chatapp to refuse the file too
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, like chatapp's ignore_eos
    ids = torch.tensor([PROMPT_IDS])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW_TOKENS,
        do_sample=False,
        pad_token_id=0,
    )
    return [int(t) for t in out[0, len(PROMPT_IDS) :]]


def torch_tokens(hf: Path) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf)
    model.generation_config.eos_token_id = None
    ids = torch.tensor([PROMPT_IDS])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False
    )
    return [int(t) for t in out[0, len(PROMPT_IDS) :]]


def why_stored(folder: Path, variants: dict[str, Any]) -> str:
    """Which tokens the file stores and why: float graphs' lead clearly at every step (the
    smallest top-2 margin, by the reference loop); int8 activations' are computed where the
    test runs."""
    sys.path.insert(0, str(ROOT))
    from tests.engine.ort_reference import greedy_tokens

    why = []
    stored = [name for name, tokens in variants.items() if isinstance(tokens, list)]
    if stored:
        runs = {name: greedy_tokens(folder, name, PROMPT_IDS, NEW_TOKENS) for name in stored}
        name, run = min(runs.items(), key=lambda item: min(item[1].margins))
        step = run.margins.index(min(run.margins))
        why.append(
            "Stored: float graphs, whose greedy token leads the runner-up by at least "
            f"{min(run.margins):.3f} at every step (the least: {name}, step {step}); instruction "
            "sets only reorder float sums, which moves these logits far less."
        )
    if len(stored) < len(variants):
        why.append(
            "Not stored: graphs with int8 activations, whose integer sums differ by instruction "
            "set; the test computes their tokens on the running machine."
        )
    return " ".join(why)


def write_expected(folder: Path, tool: str, runtime: str, variants: dict[str, Any]) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.engine.ort_reference import cpu_dependent

    for name in variants:
        reason = cpu_dependent(folder / name)
        if reason is not None:
            variants[name] = {"on_the_running_machine": reason}
    data = {
        "tool": tool,
        "runtime": runtime,
        "prompt_ids": PROMPT_IDS,
        "new_tokens": NEW_TOKENS,
        "why": why_stored(folder, variants),
        "variants": variants,
    }
    # One line per variant: the token lists stay readable in a diff.
    lines = [f'  "{k}": {json.dumps(v)}' for k, v in variants.items()]
    head = json.dumps({k: v for k, v in data.items() if k != "variants"}, indent=1)[:-2]
    text = head + ',\n "variants": {\n' + ",\n".join(lines) + "\n }\n}\n"
    json.loads(text)  # still JSON
    (folder / "expected.json").write_text(text, encoding="utf-8")


def run_optimum_stage(work: Path, out: Path) -> None:
    for arch in ARCHS:
        hf = work / "hf" / arch
        reference = torch_tokens(hf)
        name = f"optimum-{arch}"
        optimum_export(hf, out / name)
        tokens = optimum_tokens(out / name, "model.onnx")
        print(f"{name}: optimum {tokens}\n{' ' * len(name)}  torch   {reference}")
        write_expected(out / name, "optimum", "optimum.onnxruntime", {"model.onnx": tokens})
        if arch != "llama":
            continue
        os.environ["FORCE_ONNX_EXTERNAL_DATA"] = "1"
        optimum_export(hf, out / "optimum-llama-external-data")
        del os.environ["FORCE_ONNX_EXTERNAL_DATA"]
        write_expected(
            out / "optimum-llama-external-data",
            "optimum (external data)",
            "optimum.onnxruntime",
            {"model.onnx": optimum_tokens(out / "optimum-llama-external-data", "model.onnx")},
        )
        for dtype in ("fp16", "bf16"):
            folder = out / f"optimum-llama-{dtype}"
            try:
                optimum_export(hf, folder, dtype=dtype)
            except Exception as exc:
                print(f"{folder.name}: the exporter failed: {exc}")
                shutil.rmtree(folder, ignore_errors=True)
                continue
            write_expected(
                folder,
                f"optimum --dtype {dtype}",
                "optimum.onnxruntime",
                {"model.onnx": optimum_tokens(folder, "model.onnx")},
            )
        legacy = out / "optimum-llama-legacy"
        legacy_export(hf, legacy)
        write_expected(
            legacy,
            "optimum (decoder_model + decoder_with_past_model, merged)",
            "optimum.onnxruntime",
            {
                name: optimum_tokens(legacy, name)
                for name in ("decoder_model_merged.onnx", "decoder_with_past_model.onnx")
            },
        )
        community = out / "onnx-community-llama"
        community_variants(out / name / "model.onnx", hf, community)
        variants = {
            f"onnx/{p.name}": optimum_tokens(community, f"onnx/{p.name}")
            for p in sorted((community / "onnx").glob("*.onnx"))
        }
        write_expected(community, "onnx-community variants", "optimum.onnxruntime", variants)


# -- stage "genai" (genai venv) -------------------------------------------------------------------
def genai_tokens(folder: Path) -> list[int]:
    """NEW_TOKENS greedy tokens from onnxruntime-genai's Generator.

    The Generator stops at the end-of-text id and takes no "ignore EOS"; the greedy sequence does
    not depend on which id ends it, so the reference run names (in memory only) an end id that
    the sequence does not reach.
    """
    import numpy as np
    import onnxruntime_genai as og

    for eos in range(NEW_TOKENS + 1):
        config = og.Config(str(folder))
        config.overlay(json.dumps({"model": {"eos_token_id": eos}}))
        model = og.Model(config)
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(PROMPT_IDS) + NEW_TOKENS)
        gen = og.Generator(model, params)
        gen.append_tokens(np.asarray(PROMPT_IDS, dtype=np.int32))
        tokens: list[int] = []
        while not gen.is_done() and len(tokens) < NEW_TOKENS:
            gen.generate_next_token()
            tokens.append(int(gen.get_next_tokens()[0]))
        if len(tokens) == NEW_TOKENS and eos not in tokens:
            return tokens
    raise RuntimeError(f"{folder.name}: no end id left unused by the greedy sequence")


def run_genai_stage(work: Path, out: Path) -> None:
    for arch, precision in (("llama", "int4"), ("llama", "fp32"), ("qwen2", "int4")):
        folder = out / f"genai-{arch}-{precision}"
        shutil.rmtree(folder, ignore_errors=True)
        cache = work / "genai-cache" / f"{arch}-{precision}"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "onnxruntime_genai.models.builder",
                "-i",
                str(work / "hf" / arch),
                "-o",
                str(folder),
                "-p",
                precision,
                "-e",
                "cpu",
                "-c",
                str(cache),
            ],
            check=True,
        )
        tokens = genai_tokens(folder)
        print(f"{folder.name}: genai {tokens}")
        write_expected(
            folder,
            f"onnxruntime-genai builder -p {precision} -e cpu",
            "onnxruntime_genai.Generator",
            {"model.onnx": tokens},
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimum-venv", type=Path, help="venv with optimum-onnx")
    parser.add_argument("--genai-venv", type=Path, help="venv with onnxruntime-genai")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--work", type=Path, default=Path("/tmp/chatapp-onnx-fixtures"))
    parser.add_argument("--stage", choices=("hf", "optimum", "genai"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    if args.stage == "hf":
        make_hf_models(args.work)
    elif args.stage == "optimum":
        run_optimum_stage(args.work, args.out)
    elif args.stage == "genai":
        run_genai_stage(args.work, args.out)
    else:
        if not (args.optimum_venv and args.genai_venv):
            parser.error("--optimum-venv and --genai-venv are needed (see the module docstring)")
        shutil.rmtree(args.out, ignore_errors=True)
        shutil.rmtree(args.work, ignore_errors=True)
        args.out.mkdir(parents=True)
        for stage, venv in (
            ("hf", args.optimum_venv),
            ("optimum", args.optimum_venv),
            ("genai", args.genai_venv),
        ):
            cmd = [str(venv / "bin" / "python"), __file__, "--stage", stage]
            cmd += ["--out", str(args.out), "--work", str(args.work)]
            subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
