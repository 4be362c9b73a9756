"""Other systems beside the loops in `chatapp bench`: onnxruntime-genai and llama.cpp.

Each peer runs the same prompt ids greedily for the same number of tokens, once per repeat right
beside the pair of loops, and its ratio to IO-Binding is the median of the per-repeat ratios.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chatapp.engine.bench import floor
from chatapp.engine.bench.stats import ratio, summarize_peer
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.engine.modes import MODES

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine

PEER_NAMES = ("genai", "llamacpp")


class Peer(Protocol):
    name: str

    def run(self, ids: list[int], n: int) -> RunStats: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class _Genai:
    name = "genai"

    def __init__(self, folder: Path, threads: int | None) -> None:
        from chatapp.engine.bench.genai_peer import GenaiPeer

        self.peer = GenaiPeer(folder, threads)
        self.run = self.peer.run

    def describe(self) -> dict[str, Any]:
        import onnxruntime_genai as og

        # It runs chatapp's folder: the loops' weight bytes (bench.result_header) are its own.
        return {"system": "onnxruntime-genai", "version": og.__version__}

    def close(self) -> None:
        pass


class _LlamaCpp:
    name = "llamacpp"

    def __init__(self, gguf: Path, threads: int | None, n_ctx: int, python: str | None) -> None:
        from chatapp.engine.bench.llamacpp_peer import LlamaCppPeer

        self.gguf = gguf
        self.peer = LlamaCppPeer(gguf, threads, n_ctx, python)
        self.run = self.peer.run

    def describe(self) -> dict[str, Any]:
        return {
            "system": "llama.cpp (llama-cpp-python)",
            "version": self.peer.version,
            "gguf": str(self.gguf),
            "omp_wait_policy": self.peer.wait_policy,
            "flash_attention": True,
            "kv_cache": "f16",
            # llama.cpp reads the GGUF's own blocks: the floor a folder is measured against.
            "weight_bytes_per_step": floor.gguf_weight_bytes_per_step(self.gguf),
        }

    def close(self) -> None:
        self.peer.close()


@dataclass(frozen=True)
class PeerSettings:
    names: tuple[str, ...]  # PEER_NAMES to run beside the loops
    threads: int | None
    # The GGUF llama.cpp runs (for the default model the command line names its bundled file).
    gguf: Path | None = None
    python: str | None = None  # a Python with llama-cpp-python (default: this one)


@contextmanager
def open_peers(
    settings: PeerSettings, engine: Engine, n_ctx: int, report: Callable[[str], None]
) -> Iterator[list[Peer]]:
    """Start the configured peers (each closed on the way out, whatever happens)."""
    peers: list[Peer] = []
    try:
        for name in settings.names:
            if name == "genai":
                peers.append(_Genai(engine.info.folder, settings.threads))
                report("with onnxruntime-genai on the same folder, a run beside each repeat")
            elif name == "llamacpp":
                gguf = settings.gguf
                if gguf is None:
                    raise EngineError(
                        "llama.cpp runs a GGUF file: name the one this model came from "
                        "(--peer-gguf)."
                    )
                peers.append(_LlamaCpp(gguf, settings.threads, n_ctx, settings.python))
                report(f"with llama.cpp on {gguf.name} in its own process, beside each repeat")
            else:
                raise EngineError(f"Unknown peer '{name}': {', '.join(PEER_NAMES)}.")
        yield peers
    finally:
        for peer in peers:
            peer.close()


def peer_point(
    name: str, ours: list[RunStats], theirs: list[RunStats], eos: set[int]
) -> dict[str, Any]:
    """A peer's figures at one prompt, its per-repeat ratio to IO-Binding, and token agreement."""
    mine = ours[0].token_ids
    # A peer may not stop at end-of-text the way ours ignores it: compare up to ours' first.
    cut = next((i for i, t in enumerate(mine) if t in eos), len(mine))
    return {
        name: summarize_peer(theirs),
        f"iobinding_vs_{name}": statistics.median(
            ratio(a.tokens_per_s, b.tokens_per_s) for a, b in zip(ours, theirs, strict=True)
        ),
        # Time to first token the same way: below 1 means IO-Binding answers sooner.
        f"iobinding_ttft_vs_{name}": statistics.median(
            ratio(a.ttft_s, b.ttft_s) for a, b in zip(ours, theirs, strict=True)
        ),
        f"{name}_same_tokens": theirs[0].token_ids[:cut] == mine[:cut],
    }


def physical_floor(engine: Engine, peers: list[Peer], result: dict[str, Any]) -> dict[str, Any]:
    """Bytes a decode step reads, the machine's read bandwidth, and each system's share."""
    threads = engine.threads or engine.session.get_session_options().intra_op_num_threads
    bandwidth = floor.read_bandwidth(max(1, threads))
    context = result["prompt_tokens"] + result["max_new_tokens"] // 2
    kv = engine.info.kv_bytes_per_token() * context
    ours = floor.onnx_weight_bytes_per_step(engine.info.onnx_path)
    systems: dict[str, dict[str, Any]] = {}
    ceiling = floor.ceiling_tokens_per_s(ours, kv, bandwidth)
    for mode in (m for m in MODES if m in result):
        systems[mode] = _share(ours, kv, ceiling, result[mode]["tokens_per_s"])
    if "genai" in result:
        systems["genai"] = _share(ours, kv, ceiling, result["genai"]["tokens_per_s"])
    llama = next((p for p in peers if isinstance(p, _LlamaCpp)), None)
    if llama is not None and "llamacpp" in result:
        weights = floor.gguf_weight_bytes_per_step(llama.gguf)
        half_kv = kv // 2  # f16 cache
        top = floor.ceiling_tokens_per_s(weights, half_kv, bandwidth)
        systems["llamacpp"] = _share(weights, half_kv, top, result["llamacpp"]["tokens_per_s"])
    return {
        "read_bandwidth_bytes_per_s": bandwidth,
        "threads": threads,
        "context_tokens": context,
        "systems": systems,
    }


def _share(weights: int, kv: int, ceiling: float, tokens_per_s: float) -> dict[str, Any]:
    return {
        "weight_bytes_per_step": weights,
        "kv_bytes_per_step": kv,
        "ceiling_tokens_per_s": ceiling,
        "tokens_per_s": tokens_per_s,
        "share_of_ceiling": tokens_per_s / ceiling if ceiling else 0.0,
    }
