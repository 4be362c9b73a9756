"""Whether fast's mean KL divergence and llama.cpp's differ by more than their noise: the same
windows as scripts/fidelity.py, position by position, the paired difference KL(fast) - KL(llama)
with its standard error and a bootstrap interval (resampling positions), per window too, and
where the largest differences sit (the 99th percentile's positions).

    .venv/bin/python scripts/fidelity_gap.py --model FOLDER --gguf GGUF \
        --llama-python /work/venvs/llama/bin/python [--windows 4] [--threads 2]

Extra systems come as NAME=ENV pairs (--system exact=CHATAPP_GGUF_PRECISION=exact): each runs
the engine in this process with that variable set while its session loads; a NAME that starts
with "llama.cpp" runs llama.cpp's child with it (--system llama.cpp-fa=CHATAPP_LLAMA_FLASH_ATTN=1).

Besides the KL divergence, each system's logit error against the reference: the root mean square
over the vocabulary of (logits - reference), each row's mean taken out (a shift changes no
probability). It weighs every token alike, so it says which arithmetic lands nearer the float64
logits without the few positions whose distribution makes the KL divergence large. `--save
FILE.npz` keeps the per-position figures and the logits of the positions with the largest KLD.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chatapp.convert.reference import ReferenceModel  # noqa: E402
from chatapp.engine.bench.fidelity import (  # noqa: E402
    WINDOW,
    engine_window_logits,
    kl_divergence,
    log_softmax,
    scored_positions,
)
from chatapp.engine.engine import Engine  # noqa: E402
from chatapp.session.fidelity import fidelity_text, llama_cpp_logits, text_windows  # noqa: E402


def paired(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> str:
    diff = a - b
    se = diff.std(ddof=1) / np.sqrt(diff.size)
    boots = [diff[rng.integers(0, diff.size, diff.size)].mean() for _ in range(2000)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    # sign test: how far the count of positions where the first is larger sits from half
    larger = int(np.sum(diff > 0))
    z = (larger - diff.size / 2) / np.sqrt(diff.size / 4)
    return (
        f"mean {a.mean():.5f} vs {b.mean():.5f}: difference {diff.mean():+.6f} "
        f"(standard error {se:.6f}; bootstrap 95% {lo:+.6f} .. {hi:+.6f}); "
        f"first larger at {larger / diff.size:.1%} of {diff.size} positions (sign test z {z:+.1f})"
    )


def logit_error(reference: np.ndarray, model: np.ndarray) -> np.ndarray:
    """Per row: the RMS over the vocabulary of model - reference, each row's mean removed."""
    e = np.asarray(model, dtype=np.float64) - reference
    e -= e.mean(axis=-1, keepdims=True)
    return np.asarray(np.sqrt((e * e).mean(axis=-1)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--llama-python", required=True)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--system", action="append", default=[], help="NAME=VAR=VALUE")
    parser.add_argument("--save", type=Path, help="per-position figures to this .npz")
    parser.add_argument("--keep", type=int, default=8, help="positions whose logits --save keeps")
    args = parser.parse_args()
    started = time.perf_counter()
    systems: dict[str, Engine] = {
        "fast": Engine(args.model, threads=args.threads, max_context=WINDOW, precision="fast")
    }
    llamas: dict[str, tuple[str, str]] = {}
    for spec in args.system:
        name, _, assignment = spec.partition("=")
        var, _, value = assignment.partition("=")
        if name.startswith("llama.cpp"):
            llamas[name] = (var, value)
            continue
        before = os.environ.get(var)
        os.environ[var] = value
        systems[name] = Engine(args.model, threads=args.threads, max_context=WINDOW)
        if before is None:
            del os.environ[var]
        else:
            os.environ[var] = before
    first = systems["fast"]
    cut = text_windows(first, fidelity_text(), WINDOW)[: args.windows]
    reference = ReferenceModel(args.gguf)
    llama = llama_cpp_logits(args.llama_python, args.gguf, args.threads)
    scored = scored_positions(WINDOW)
    kld: dict[str, list[np.ndarray]] = {name: [] for name in [*systems, "llama.cpp", *llamas]}
    top1: dict[str, list[np.ndarray]] = {name: [] for name in kld}  # the reference's top token kept
    error: dict[str, list[np.ndarray]] = {name: [] for name in kld}
    kept: list[tuple[float, int, int, dict[str, np.ndarray]]] = []  # (largest KLD, window, row)
    top_prob: list[np.ndarray] = []  # the reference's largest probability per position
    for index, ids in enumerate(cut):
        print(f"window {index + 1} of {len(cut)}", file=sys.stderr, flush=True)
        ref = reference.logits(ids)[scored.start : scored.stop]
        top_prob.append(np.exp(log_softmax(ref).max(axis=-1)))
        rows = {name: engine_window_logits(e, ids, "prompt") for name, e in systems.items()}
        rows["llama.cpp"] = llama(index, ids)
        for name, (var, value) in llamas.items():
            os.environ[var] = value  # read by the child this call starts
            try:
                rows[name] = llama(index, ids)
            finally:
                del os.environ[var]
        for name, got in rows.items():
            kld[name].append(kl_divergence(ref, got))
            top1[name].append(np.argmax(got, axis=-1) == np.argmax(ref, axis=-1))
            error[name].append(logit_error(ref, got))
        if args.save:
            largest = np.max([kld[name][-1] for name in rows], axis=0)
            for row in np.argsort(largest)[::-1][: args.keep]:
                logits = {"reference": ref[row], **{n: got[row] for n, got in rows.items()}}
                kept.append((float(largest[row]), index, int(row), logits))
            kept = sorted(kept, key=lambda k: -k[0])[: args.keep]
    rng = np.random.default_rng(0)
    whole = {name: np.concatenate(parts) for name, parts in kld.items()}
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"{first.info.name}: {len(cut)} windows, {whole['fast'].size} positions, load {load}")
    print(
        "top-1 agreement: "
        + ", ".join(f"{name} {np.concatenate(v).mean():.2%}" for name, v in top1.items())
    )
    print(
        "99th percentile KLD: "
        + ", ".join(f"{name} {np.percentile(v, 99):.3g}" for name, v in whole.items())
    )
    rms = {name: np.concatenate(v) for name, v in error.items()}
    print(
        "logit error (RMS over the vocabulary, mean of positions): "
        + ", ".join(f"{name} {v.mean():.5f}" for name, v in rms.items())
    )
    print(
        "positions over 0.1 nats: "
        + ", ".join(f"{name} {int(np.sum(v > 0.1))}" for name, v in whole.items())
    )
    for name in [*systems, *llamas]:
        print(f"{name} - llama.cpp: {paired(whole[name], whole['llama.cpp'], rng)}")
        for w in range(len(cut)):
            print(f"  window {w + 1}: {paired(kld[name][w], kld['llama.cpp'][w], rng)}")
        print(f"  logit error: {paired(rms[name], rms['llama.cpp'], rng)}")
        if name != "fast":  # a candidate against today's fast, position by position
            print(f"{name} - fast: {paired(whole[name], whole['fast'], rng)}")
    top = np.argsort(whole["llama.cpp"] + whole["fast"])[::-1][: max(1, whole["fast"].size // 100)]
    share = {name: v[top].sum() / v.sum() for name, v in whole.items()}
    print(
        "the 1% of positions with the largest KLD (either system) hold "
        + ", ".join(f"{name} {s:.0%}" for name, s in share.items())
        + " of each system's total"
    )
    rest = np.ones(whole["fast"].size, dtype=bool)
    rest[top] = False
    for name in [*systems, *llamas]:
        gap = paired(whole[name][rest], whole["llama.cpp"][rest], rng)
        print(f"{name} - llama.cpp without those: {gap}")
    if args.save:
        arrays = {f"kld_{n}": v for n, v in whole.items()}
        arrays |= {f"top1_{n}": np.concatenate(v) for n, v in top1.items()}
        arrays |= {f"rms_{n}": v for n, v in rms.items()}
        arrays["reference_top_prob"] = np.concatenate(top_prob)
        arrays["window"] = np.concatenate([np.full(p.size, i) for i, p in enumerate(kld["fast"])])
        arrays["kept_window"] = np.array([k[1] for k in kept])
        arrays["kept_row"] = np.array([k[2] for k in kept])
        for n in kept[0][3] if kept else {}:
            arrays[f"kept_logits_{n}"] = np.stack([k[3][n] for k in kept])
        np.savez_compressed(args.save, **arrays)
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
