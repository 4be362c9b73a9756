"""Make a tests/convert/data fixture: llama.cpp's token ids for a GGUF vocabulary, kept small.

    .venv/bin/python scripts/tokenizer_fixture.py MODEL.gguf OUT.json --family NAME \\
        --llama-python /path/to/venv-with-llama-cpp-python/bin/python [--about TEXT]

The whole vocabulary (up to 262k tokens) is too big to commit, so the fixture keeps only the
tokens that can take part in tokenizing TEXTS: every token that is a substring of some text
(in the vocabulary's own spelling: GPT-2 byte characters, or SentencePiece's "▁"), the byte
tokens, and the merges among them. A merge or a SentencePiece join only ever builds substrings
of its text, so the reduced vocabulary tokenizes TEXTS the same way; the script checks that by
running llama.cpp on both files and mapping the reduced ids back. llama-cpp-python is needed
here only, never by the tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import gguf

TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "  two leading spaces",
    "trailing spaces   ",
    "tabs\tand\ttabs\t\t",
    "new\nlines\n\nand\n\n\nmore\r\nwindows",
    "    four spaces then text",
    "                                    many spaces",
    "   \n   \n",
    "\n",
    " ",
    "a",
    "12345 and 3.14159 and 2024-11-23, 1,000,000",
    "0 00 000 0000 00000 123456789012",
    "The year 2024 had 366 days.",
    "99 bottles; 3.0e-5; 0x1F; 1_000",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    'if __name__ == "__main__":\n\tmain()',
    '<div class="box">&nbsp;</div>',
    "SELECT * FROM users WHERE id=42;",
    "x = {'a': [1, 2, 3], \"b\": None}  # comment",
    "日本語のテキストです。",
    "中文测试：你好，世界！",
    "한국어 문장입니다.",
    "Привет, мир! Как дела?",
    "Ελληνικά κείμενα",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "ไทย ภาษา",
    "tiếng Việt có dấu",
    "emoji 🙂👍🏽🎉 and 👨‍👩‍👧‍👦 family",
    "🤖🤖🤖",
    "🇫🇷🇯🇵 flags 1️⃣",
    "café naïve résumé façade",
    "I'm sure they'll say we've done it, don't you think?",
    "HELLO World MiXeD CaSe",
    "a.b,c;d:e!f?g",
    "--- *** ___ ### !!! ???",
    "https://example.com/path?query=1&x=y#frag",
    "$100.00 €50 £20 ¥1000",
    "Zero\u200bwidth\u00a0nbsp",
    "\u3000full width\u3000space ｆｕｌｌ",
    "ﬁ ligature and Ⅻ roman ½",
    "x\u0301 combining",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<|user|>\nHello<|end|>\n<|assistant|>\nHi! <|end|>\n<|endoftext|>",
    "<bos>text<eos> <s>[INST] hi [/INST] </s>",
    "<think>\nok\n</think>\n\nDone.",
    # Case-aware splits (GPT-4o's, Tekken's): contractions in upper case, CamelCase, non-ASCII
    # capitals, combining marks.
    "DON'T STOP, I'M here and we'll see; YOU'LL know, SHE'D go, THEY'RE WE'VE It'S",
    "ÉCOLE École éCOLE Ölçüm İstanbul ΑΘΗΝΑ Αθήνα ПРИВЕТ",
    "CamelCaseWord HTTPServer getHTTPResponse iPhone McDonald'S",
    "path/to/file.py\n// comment\n/* block */ e\u0301\u0302",
    "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n",
    "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>",
]


def metadata(path: Path) -> dict[str, Any]:
    reader = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def byte_chars() -> dict[int, str]:
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, shifted = {}, 0
    for b in range(256):
        if b in kept:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return chars


def spellings(meta: dict[str, Any], texts: list[str]) -> list[str]:
    """The texts as the vocabulary spells its tokens, in every variant a fragment can take."""
    if meta["tokenizer.ggml.model"] == "gpt2":
        table = byte_chars()
        return ["".join(table[b] for b in t.encode()) for t in texts]
    out = []
    for t in texts:
        for variant in (t, " " + t, t.strip(), " " + t.strip()):
            out.append(variant.replace(" ", "\u2581"))
    # After a special token, a fragment starts anew (with "▁", maybe without its whitespace).
    tokens = meta["tokenizer.ggml.tokens"]
    specials = [tok for tok, kind in zip(tokens, types(meta), strict=True) if kind != 1]
    for t in texts:
        pieces = [t]
        for s in specials:
            if s and s in t:
                pieces = [p for piece in pieces for p in piece.split(s)]
        for p in pieces:
            for variant in (p, " " + p, p.lstrip(), " " + p.lstrip()):
                out.append(variant.replace(" ", "\u2581"))
    return out


def types(meta: dict[str, Any]) -> list[int]:
    n = len(meta["tokenizer.ggml.tokens"])
    return [int(x) for x in meta.get("tokenizer.ggml.token_type", [1] * n)]


def reduce(meta: dict[str, Any], texts: list[str]) -> tuple[dict[str, Any], list[int]]:
    """A vocabulary that tokenizes `texts` like `meta` does; and new id -> old id."""
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    kinds = types(meta)
    haystack = "\n".join(spellings(meta, texts) + texts)
    named = {
        int(meta[k])
        for k in (
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.unknown_token_id",
            "tokenizer.ggml.padding_token_id",
        )
        if k in meta
    }
    keep = [
        i
        for i, (tok, kind) in enumerate(zip(tokens, kinds, strict=True))
        if i in named or kind == 6 or (tok and tok in haystack) or (kind == 2)
    ]
    if meta["tokenizer.ggml.model"] == "gpt2":
        keep = sorted(set(keep) | {tokens.index(c) for c in byte_chars().values() if c in tokens})
    new_id = {old: new for new, old in enumerate(keep)}
    small = {k: v for k, v in meta.items() if not k.startswith("tokenizer.ggml.")}
    small["tokenizer.ggml.model"] = meta["tokenizer.ggml.model"]
    small["tokenizer.ggml.tokens"] = [tokens[i] for i in keep]
    small["tokenizer.ggml.token_type"] = [kinds[i] for i in keep]
    if "tokenizer.ggml.scores" in meta:
        small["tokenizer.ggml.scores"] = [float(meta["tokenizer.ggml.scores"][i]) for i in keep]
    if "tokenizer.ggml.merges" in meta:
        kept = set(small["tokenizer.ggml.tokens"])
        merges = []
        for m in meta["tokenizer.ggml.merges"]:
            cut = m.find(" ", 1)
            left, right = m[:cut], m[cut + 1 :]
            if cut > 0 and left in kept and right in kept and left + right in kept:
                merges.append(m)
        small["tokenizer.ggml.merges"] = merges
    for key, value in meta.items():
        if key.endswith("_token_id"):
            small[key] = new_id[int(value)]
        elif key.startswith("tokenizer.ggml.") and key not in small:
            small[key] = value
    return small, keep


def write_vocab_gguf(meta: dict[str, Any], path: Path) -> None:
    arch = str(meta["general.architecture"])
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        if key in ("general.architecture",):
            continue
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value) if value >= 0 else writer.add_int32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, list) and key == "tokenizer.ggml.token_type":
            writer.add_array(key, [int(v) for v in value])
        elif isinstance(value, list):
            writer.add_array(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


LLAMA_CPP_IDS = """
import json, sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
texts = json.load(open(sys.argv[2], encoding="utf-8"))
ids = [llm.tokenize(t.encode(), add_bos=False, special=True) for t in texts]
print(json.dumps({"version": llama_cpp.__version__, "ids": ids}))
"""


def llama_cpp_ids(python: str, path: Path, texts: list[str]) -> tuple[str, list[list[int]]]:
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        out = subprocess.run(
            [python, "-c", LLAMA_CPP_IDS, str(path), str(texts_file)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["version"], result["ids"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--family", required=True)
    parser.add_argument("--llama-python", required=True)
    parser.add_argument("--about", default="")
    args = parser.parse_args()

    meta = metadata(args.gguf)
    small, old_ids = reduce(meta, TEXTS)
    with tempfile.TemporaryDirectory() as tmp:
        small_path = Path(tmp) / "small.gguf"
        write_vocab_gguf(small, small_path)
        version, ids = llama_cpp_ids(args.llama_python, small_path, TEXTS)
    _, full_ids = llama_cpp_ids(args.llama_python, args.gguf, TEXTS)
    mapped = [[old_ids[i] for i in row] for row in ids]
    differ = [t for t, a, b in zip(TEXTS, mapped, full_ids, strict=True) if a != b]
    if differ:
        print(f"the reduced vocabulary tokenizes differently: {differ!r}", file=sys.stderr)
        return 1
    keys = {k: v for k, v in small.items() if not k.startswith("tokenizer.ggml.")}
    fixture = {
        "about": args.about,
        "family": args.family,
        "source_vocabulary_size": len(meta["tokenizer.ggml.tokens"]),
        "llama_cpp_python_version": version,
        "call": "Llama(model_path, vocab_only=True).tokenize(text.encode(), add_bos=False, "
        "special=True) on this reduced vocabulary; the full one gives the same tokens",
        "metadata": {**keys, **{k: v for k, v in small.items() if k.startswith("tokenizer.")}},
        "token_ids": dict(zip(TEXTS, ids, strict=True)),
    }
    args.out.write_text(json.dumps(fixture, ensure_ascii=False) + "\n", encoding="utf-8")
    size = args.out.stat().st_size
    print(f"{args.out}: {len(small['tokenizer.ggml.tokens'])} tokens, {size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
