"""`chatapp search` and `chatapp pull` against the fake hub: the real client, the real
download, the real converter; the pulled model answers as the same GGUF converted directly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatapp.cli.main import main
from chatapp.hub.download import repo_folder
from chatapp.hub.provenance import read_origin
from tests.hub.fake_hub import COMMIT, FakeHub, Fault, HostedRepo

REPO = "someone/Tiny-Llama-GGUF"


def _host(hub: FakeHub, tiny_gguf: Path) -> HostedRepo:
    return hub.add(
        HostedRepo(
            REPO,
            {
                "tiny-llama-Q4_1.gguf": tiny_gguf.read_bytes(),
                "tiny-llama-Q8_0.gguf": b"GGUF" + bytes(64),
                "mmproj-tiny-F16.gguf": b"GGUF" + bytes(64),
            },
            context_length=512,
        )
    )


def test_search_prints_json(
    fake_hub: FakeHub, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _host(fake_hub, tiny_gguf)
    assert main(["search", "tiny-llama", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert [h["repo"] for h in hits] == [REPO]
    assert main(["search", "tiny-llama"]) == 0
    assert REPO in capsys.readouterr().out


def test_pull_without_a_file_lists_them_with_fit_marks(
    fake_hub: FakeHub, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _host(fake_hub, tiny_gguf)
    assert main(["pull", REPO, "--json"]) == 2
    out = capsys.readouterr()
    rows = {r["file"]: r for r in json.loads(out.out)}
    assert rows["tiny-llama-Q4_1.gguf"]["usable"] is True
    assert rows["tiny-llama-Q4_1.gguf"]["quant"] == "Q4_1"
    assert rows["mmproj-tiny-F16.gguf"]["usable"] is False
    assert "name one of the files" in out.err and out.err.count("\n") == 1


def test_pull_downloads_converts_and_the_model_answers(
    fake_hub: FakeHub,
    hub_env: Path,
    tiny_gguf: Path,
    tiny_model_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _host(fake_hub, tiny_gguf)
    assert main(["pull", REPO, "--quant", "Q4_1"]) == 0
    out = capsys.readouterr()
    folder = Path(out.out.strip().splitlines()[-1])
    assert folder.parent == hub_env
    assert "pull [" in out.err and "convert [" in out.err
    gguf = repo_folder(hub_env, REPO) / "tiny-llama-Q4_1.gguf"
    origin = read_origin(gguf)
    assert origin is not None and origin.revision == COMMIT
    answers = []
    for model in (folder, tiny_model_dir):
        args = ["generate", "--model", str(model), "--prompt", "hi", "--greedy"]
        assert main([*args, "--max-new-tokens", "8"]) == 0
        answers.append(capsys.readouterr().out.splitlines()[0])
    assert answers[0] == answers[1]
    # Pulled again: nothing downloaded or converted again.
    before = len(fake_hub.requests)
    assert main(["pull", REPO, "tiny-llama-Q4_1.gguf"]) == 0
    assert Path(capsys.readouterr().out.strip().splitlines()[-1]) == folder
    assert [r for r in fake_hub.requests[before:] if "/cdn/" in r[1]] == []


def test_pull_refuses_an_unsupported_family_before_downloading(
    fake_hub: FakeHub, hub_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.tiny_model import write_tiny_gguf

    phi2 = write_tiny_gguf(tmp_path / "phi2.gguf", architecture="phi2")
    # The hub does not say the architecture: the header's first bytes do.
    fake_hub.add(HostedRepo(REPO, {"phi2-Q4_1.gguf": phi2.read_bytes()}, architecture=None))
    assert main(["pull", REPO, "phi2-Q4_1.gguf"]) == 2
    err = capsys.readouterr().err
    assert "'phi2' model" in err and err.count("\n") == 1
    assert [r[2] for r in fake_hub.requests if "/cdn/" in r[1]] == ["bytes=0-524287"]
    assert list(hub_env.iterdir()) == []


def test_pull_failures_are_one_line(
    fake_hub: FakeHub, hub_env: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _host(fake_hub, tiny_gguf)
    assert main(["pull", REPO, "--quant", "Q2_K"]) == 2
    assert "no Q2_K file" in capsys.readouterr().err
    assert main(["pull", "nobody/nothing", "x.gguf"]) == 2
    assert "not found" in capsys.readouterr().err
    fake_hub.faults["tiny-llama-Q4_1.gguf"] = Fault(wrong_bytes=True)
    assert main(["pull", REPO, "--quant", "Q4_1"]) == 2
    err = capsys.readouterr().err
    assert "does not match the hub's sha256" in err
    assert err.strip().splitlines()[-1].startswith("chatapp: error:")
    assert [p.name for p in hub_env.iterdir()] == [".downloads"]
