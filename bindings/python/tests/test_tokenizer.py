"""Tokenizer, Detokenizer and the chat template through the binding."""

import threading

import pytest

import llmrt
from conftest import KJV, KJV_PROMPT, KJV_TEXT


@pytest.fixture(scope="module")
def tok():
    with llmrt.Tokenizer(KJV) as t:
        yield t


def test_info(tok):
    assert tok.info.family == 1  # Kimi's tiktoken.model
    assert (tok.bos_id, tok.eos_id) == (3840, 3841)
    assert tok.special_id("<|im_end|>") == 3842 and tok.special_id("<|nope|>") is None


def test_round_trip(tok):
    text = KJV_PROMPT + KJV_TEXT
    ids = tok.encode(text)
    assert ids and tok.decode(ids) == text
    assert tok.encode(text.encode()) == ids  # bytes are UTF-8


def test_special_tokens(tok):
    assert tok.encode("<|im_end|>", parse_special=True) == [3842]
    plain = tok.encode("<|im_end|>")
    assert 3842 not in plain and tok.decode(plain) == "<|im_end|>"
    assert tok.decode([3842]) == "<|im_end|>" and tok.decode([3842], skip_special=True) == ""


def test_detokenizer_streams_whole_characters(tok):
    text = "Grüße, 世界 🙂 — amen."
    ids = tok.encode(text)
    assert len(ids) > len(text.split())
    with tok.detokenizer() as d:
        pieces = [d.push(i) for i in ids] + [d.flush()]
    assert "".join(pieces) == text
    for p in pieces:
        p.encode("utf-8")  # every piece is whole characters (no lone surrogates)


def test_detokenizer_long_piece(tok):
    # A piece longer than the detokenizer's first buffer is collected, not lost.
    ids = tok.encode("x" * 5000)
    with tok.detokenizer() as d:
        assert "".join(d.push(i) for i in ids) + d.flush() == "x" * 5000


def test_bad_ids(tok):
    with pytest.raises(llmrt.InvalidArgumentError) as ei:
        tok.decode([999999])
    assert "999999" in ei.value.message
    with tok.detokenizer() as d:
        with pytest.raises(llmrt.InvalidArgumentError):
            d.push(-5)
        assert d.push(tok.encode("ok")[0]) == "ok"  # the bad id was not taken


def test_chat_template(tok):
    msgs = [{"role": "system", "content": "Be brief."}, ("user", "Who?")]
    text = tok.apply_chat_template(msgs)
    assert "Be brief." in text and "Who?" in text and "<|im_end|>" in text
    ids = tok.encode(text, parse_special=True)
    assert 3842 in ids
    with pytest.raises(llmrt.InvalidArgumentError):
        tok.apply_chat_template([{"role": "user"}])
    with pytest.raises(llmrt.InvalidArgumentError):
        tok.apply_chat_template([("user", "a\0b")])


def test_shared_by_threads(tok):
    text = KJV_PROMPT + KJV_TEXT
    want = tok.encode(text)
    bad = []

    def work():
        for _ in range(50):
            if tok.encode(text) != want or tok.decode(want) != text:
                bad.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
