"""Search and file listings through the real huggingface_hub client against the fake hub, and
each failure the hub can answer with as one line."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest

from chatapp.hub.catalog import FilePart, group_parts, quant_of, repo_files, search
from chatapp.hub.errors import HubError
from tests.hub.fake_hub import COMMIT, FakeHub, Fault, HostedRepo


def _repo(hub: FakeHub) -> HostedRepo:
    return hub.add(
        HostedRepo(
            "someone/SmolLM2-135M-Instruct-GGUF",
            {
                "SmolLM2-135M-Instruct-Q4_K_M.gguf": b"GGUF" + bytes(300),
                "SmolLM2-135M-Instruct-Q8_0.gguf": b"GGUF" + bytes(500),
                "big-Q4_0-00001-of-00002.gguf": b"a" * 10,
                "big-Q4_0-00002-of-00002.gguf": b"b" * 20,
                "mmproj-F16.gguf": b"GGUF" + bytes(10),
                "README.md": b"# readme",
            },
        )
    )


def test_search_finds_gguf_repositories_by_name(fake_hub: FakeHub) -> None:
    _repo(fake_hub)
    fake_hub.add(HostedRepo("other/Qwen3-0.6B-GGUF", {"q.gguf": b"x"}, downloads=5000))
    hits = search("smollm2")
    assert [h.repo for h in hits] == ["someone/SmolLM2-135M-Instruct-GGUF"]
    assert hits[0].downloads == 100 and hits[0].last_modified == "2026-01-02"
    assert [h.repo for h in search("GGUF")] == [
        "other/Qwen3-0.6B-GGUF",
        "someone/SmolLM2-135M-Instruct-GGUF",
    ]
    asked = [r for r in fake_hub.requests if r[1] == "/api/models"]
    assert asked, "the search went to HF_ENDPOINT"
    assert search("   ") == []  # nothing asked for: nothing sent
    assert len([r for r in fake_hub.requests if r[1] == "/api/models"]) == len(asked)


def test_a_listing_has_sizes_hashes_quantizations_and_splits_as_one(fake_hub: FakeHub) -> None:
    hosted = _repo(fake_hub)
    listing = repo_files(hosted.repo)
    assert listing.revision == COMMIT
    assert listing.architecture == "llama"
    by_name = {f.name: f for f in listing.files}
    assert set(by_name) == {
        "SmolLM2-135M-Instruct-Q4_K_M.gguf",
        "SmolLM2-135M-Instruct-Q8_0.gguf",
        "big-Q4_0-00001-of-00002.gguf",
        "mmproj-F16.gguf",
    }
    q4 = by_name["SmolLM2-135M-Instruct-Q4_K_M.gguf"]
    data = hosted.files[q4.name]
    assert q4.quant == "Q4_K_M"
    assert q4.size == len(data)
    assert q4.parts[0].sha256 == hashlib.sha256(data).hexdigest()
    split = by_name["big-Q4_0-00001-of-00002.gguf"]
    assert split.is_split and split.size == 30 and split.local_name == "big-Q4_0.gguf"
    assert by_name["mmproj-F16.gguf"].not_a_model
    assert listing.find(quant="q8_0") == by_name["SmolLM2-135M-Instruct-Q8_0.gguf"]
    assert listing.find("big-Q4_0.gguf") == split


def test_quantization_names_come_from_the_file_name() -> None:
    assert quant_of("Llama-3.2-1B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("qwen2.5-0.5b-instruct-iq4_xs.gguf") == "IQ4_XS"
    assert quant_of("gemma-3-270m-it-BF16.gguf") == "BF16"
    assert quant_of("model.gguf") is None


def test_a_split_with_a_part_missing_is_left_out() -> None:
    parts = [FilePart("m-00001-of-00003.gguf", 1, None), FilePart("m-00003-of-00003.gguf", 1, None)]
    assert group_parts(parts) == ()


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, "gated or private"),
        (403, "accept its licence"),
        (404, "not found"),
        (429, "limiting requests"),
        (500, "server error"),
    ],
)
def test_the_hub_refusing_is_one_line(fake_hub: FakeHub, status: int, words: str) -> None:
    hosted = _repo(fake_hub)
    fake_hub.faults["search"] = Fault(status=status)
    fake_hub.faults["api"] = Fault(status=status)
    for call in (lambda: search("smol"), lambda: repo_files(hosted.repo)):
        with pytest.raises(HubError) as caught:
            call()
        assert words in str(caught.value)
        assert "\n" not in str(caught.value)


def test_a_missing_repository_is_one_line(fake_hub: FakeHub) -> None:
    with pytest.raises(HubError, match=r"not found on http://127\.0\.0\.1"):
        repo_files("nobody/nothing")


def test_no_network_is_one_line_at_once(hub_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(HubError, match="could not reach") as caught:
        search("smol")
    assert "\n" not in str(caught.value)


def test_chatapps_own_offline_setting_does_not_block_what_the_user_asks(
    fake_hub: FakeHub, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from chatapp.engine.text.chat import HUB_OFFLINE_SET_BY_CHATAPP, ChatTokenizer

    _repo(fake_hub)
    monkeypatch.delenv(HUB_OFFLINE_SET_BY_CHATAPP, raising=False)
    ChatTokenizer.from_folder(
        tiny_model_dir
    )  # what loading a model does: no tokenizer reaches a hub
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ[HUB_OFFLINE_SET_BY_CHATAPP]
    # huggingface_hub imported after that reads offline mode once, at import.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert [h.repo for h in search("smol")] == ["someone/SmolLM2-135M-Instruct-GGUF"]
    assert repo_files("someone/SmolLM2-135M-Instruct-GGUF").files


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_the_users_offline_setting_is_honoured(
    fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    from chatapp.engine.text.chat import HUB_OFFLINE_SET_BY_CHATAPP

    _repo(fake_hub)
    monkeypatch.delenv(HUB_OFFLINE_SET_BY_CHATAPP, raising=False)
    monkeypatch.setenv(variable, "1")
    with pytest.raises(HubError, match="HF_HUB_OFFLINE is set") as caught:
        search("smol")
    assert "\n" not in str(caught.value)
    assert fake_hub.requests == []
