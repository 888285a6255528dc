"""Without the ``remote`` extra, a URL is refused with an error saying what to install."""

from __future__ import annotations

import sys

import pytest

import strided as st
from strided.cli import main


@pytest.fixture
def no_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # ``import httpx`` now fails


@pytest.mark.usefixtures("no_httpx")
def test_open_checkpoint_of_a_url_names_the_extra() -> None:
    url = "http://127.0.0.1:9/model.safetensors"  # never contacted
    with pytest.raises(st.FormatError, match=r"strided\[remote\]") as caught:
        st.open_checkpoint(url)
    assert url in str(caught.value)


@pytest.mark.usefixtures("no_httpx")
def test_the_command_line_names_the_extra(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "https://127.0.0.1:9/model.gguf"]) != 0
    error = capsys.readouterr().err
    assert "strided[remote]" in error and "https://127.0.0.1:9/model.gguf" in error
