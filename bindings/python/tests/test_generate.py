"""Greedy continuations, exact: the C ABI test's golden ids and llm-run's text."""

import pytest

import llmrt
from conftest import GOLDEN_IDS, GOLDEN_PROMPT, KJV, KJV_PROMPT, KJV_TEXT


def test_golden_ids_f32_kv(tiny):
    with tiny.session(max_tokens=len(GOLDEN_IDS)) as s:
        assert s.generate(GOLDEN_PROMPT) == GOLDEN_IDS
        assert s.info().state == "finished"


@pytest.mark.parametrize("tp,ep", [(2, False), (2, True)])
def test_golden_ids_tensor_parallel(tp, ep):
    from conftest import TINY
    with llmrt.Runtime(TINY, kv_dtype="f32", tensor_parallel=tp, expert_parallel=ep) as rt:
        assert rt.info().tensor_parallel == tp
        with rt.session(max_tokens=len(GOLDEN_IDS)) as s:
            assert s.generate(GOLDEN_PROMPT) == GOLDEN_IDS


def test_golden_ids_stream_reports_length(tiny):
    with tiny.session(max_tokens=len(GOLDEN_IDS)) as s:
        stream = s.stream(GOLDEN_PROMPT, text=False)
        toks = list(stream)
        assert [t.id for t in toks] == GOLDEN_IDS
        assert all(t.text is None for t in toks)  # this checkpoint has no tokenizer
        assert stream.finish_reason == "length"


def test_golden_ids_through_plain_step(tiny):
    """A host that drives the loop itself with Runtime.step()."""
    with tiny.session(max_tokens=len(GOLDEN_IDS)) as s:
        s.append(GOLDEN_PROMPT)
        ids, reason = [], None
        for _ in range(100):
            for r in tiny.step():
                assert r.session_id == s.id and r.status == llmrt.Status.OK
                if r.token >= 0:
                    ids.append(r.token)
                reason = r.finish_reason or reason
            if reason:
                break
        assert ids == GOLDEN_IDS and reason == "length"
        assert tiny.step() == []  # nothing left to run


def test_kjv_generate_text(kjv):
    assert kjv.generate(KJV_PROMPT, max_tokens=24) == KJV_TEXT


def test_kjv_stream_pieces(kjv):
    tok = kjv.tokenizer
    prompt = tok.encode(KJV_PROMPT, parse_special=False)
    assert tok.bos_id >= 0 and prompt[0] != tok.bos_id  # no BOS added
    with kjv.stream(KJV_PROMPT, max_tokens=24) as stream:
        pieces = list(stream)
    assert len(pieces) == 24 and stream.finish_reason == "length"
    assert "".join(p.text for p in pieces) == KJV_TEXT
    assert tok.decode([p.id for p in pieces]) == KJV_TEXT
    assert stream.text == KJV_TEXT
    assert stream.session.closed  # a runtime-level stream owns its session


def test_kjv_with_fresh_runtime_per_kv_dtype():
    # F32 KV must give the same greedy text as the default BF16 on this prompt.
    with llmrt.Runtime(KJV, kv_dtype="f32", num_threads=1) as rt:
        assert rt.info().kv_dtype == 2
        assert rt.generate(KJV_PROMPT, max_tokens=24) == KJV_TEXT


def test_stop_token_ends_stream(kjv):
    tok = kjv.tokenizer
    ids = tok.encode(KJV_TEXT)
    stop = ids[5]  # a token the greedy continuation produces
    with kjv.session(max_tokens=24, stop_tokens=[stop]) as s:
        stream = s.stream(tok.encode(KJV_PROMPT))
        got = [t.id for t in stream]
    assert stream.finish_reason == "stop"
    assert got[-1] == stop and stop not in got[:-1]
    assert got == ids[:len(got)]


def test_multi_turn(kjv):
    tok = kjv.tokenizer
    with kjv.session(max_tokens=8) as s:
        first = s.generate(tok.encode(KJV_PROMPT))
        assert len(first) == 8 and s.info().state == "finished"
        second = s.generate(tok.encode(" And"))
        assert len(second) == 8
        assert s.info().num_tokens >= len(tok.encode(KJV_PROMPT)) + 8 + 1


def test_chat_stops_at_end_of_turn(kjv):
    stops = kjv.chat_stop_tokens()
    tok = kjv.tokenizer
    assert tok.eos_id in stops and tok.special_id("<|im_end|>") in stops
    assert tok.special_id("<|user|>") is None  # a GLM token, absent from Kimi's vocabulary
    messages = [{"role": "user", "content": "Who made the heaven and the earth?"}]
    with kjv.chat_stream(messages, max_tokens=48) as stream:
        toks = list(stream)
    assert stream.finish_reason in ("stop", "length")
    if stream.finish_reason == "stop":
        assert toks[-1].id in stops and toks[-1].text == ""
    assert all(t.id not in stops for t in toks[:-1])
    reply = kjv.chat(messages, max_tokens=48)
    assert reply == "".join(t.text for t in toks) and reply.strip()


def test_score_matches_greedy(kjv):
    tok = kjv.tokenizer
    ids = tok.encode(KJV_PROMPT + KJV_TEXT)
    logprobs, argmax = kjv.score(ids)
    assert len(logprobs) == len(ids) - 1 and all(lp <= 0 for lp in logprobs)
    n = len(tok.encode(KJV_PROMPT))
    # Greedy generation predicts each next token as the argmax of the teacher-forced pass.
    assert argmax[n - 1:n + 5] == ids[n:n + 6]


def test_runtime_info(kjv):
    info = kjv.info()
    assert info.architecture == "DeepseekV3ForCausalLM" and info.model_type == "kimi_k2"
    assert info.vocab_size == 4096 and info.num_layers == 4
    assert info.pages_free == info.pages_total > 0


def test_logits(tiny):
    with tiny.session(max_tokens=1) as s:
        with pytest.raises(llmrt.InvalidStateError):
            s.logits()  # nothing sampled yet
        assert s.generate(GOLDEN_PROMPT) == GOLDEN_IDS[:1]
        logits = s.logits()
        assert len(logits) == tiny.info().vocab_size
        assert max(range(len(logits)), key=logits.__getitem__) == GOLDEN_IDS[0]


def test_session_without_logits_decodes_the_same_ids(tiny):
    # Both streams open at once, so each step advances both sessions: the one that keeps its
    # logits and the one that does not (LLM_SAMPLING_NO_LOGITS) get the golden ids alike.
    with tiny.session(max_tokens=len(GOLDEN_IDS)) as keep, \
            tiny.session(max_tokens=len(GOLDEN_IDS), keep_logits=False) as lean:
        with keep.stream(GOLDEN_PROMPT, text=False) as a, lean.stream(GOLDEN_PROMPT, text=False) as b:
            assert [t.id for t in a] == GOLDEN_IDS
            assert [t.id for t in b] == GOLDEN_IDS
            assert a.finish_reason == b.finish_reason == "length"
        assert len(keep.logits()) == tiny.info().vocab_size
        with pytest.raises(llmrt.InvalidStateError) as e:
            lean.logits()
        assert e.value.status == llmrt.Status.INVALID_STATE
        assert "LLM_SAMPLING_NO_LOGITS" in e.value.message
    with pytest.raises(llmrt.InvalidArgumentError):
        tiny.session(keep_logits=0)  # a bool, as the other options are checked


def test_int8_activations_change_int4_products_only_slightly():
    from conftest import TINY
    ids = list(GOLDEN_PROMPT) + list(GOLDEN_IDS)
    kw = dict(kv_dtype="f32", prefill_weights="int4_g32", decode_weights="int4_g32")
    with llmrt.Runtime(TINY, **kw) as exact, llmrt.Runtime(TINY, quantized_activations="int8", **kw) as int8:
        a, _ = exact.score(ids)
        b, _ = int8.score(ids)
    diff = max(abs(x - y) for x, y in zip(a, b))
    # The policy reaches the engine (products differ); int8 rounding moves log-probabilities little.
    assert 0.0 < diff < 0.5, diff
    with pytest.raises(llmrt.InvalidArgumentError):
        llmrt.Runtime(TINY, quantized_activations="int4")
    with pytest.raises(llmrt.InvalidArgumentError, match="quantized_activations"):
        llmrt.Runtime(TINY, quantized_activations=7)


def test_bf16_activations_round_bf16_products_slightly():
    from conftest import TINY
    ids = list(GOLDEN_PROMPT) + list(GOLDEN_IDS)
    with llmrt.Runtime(TINY, kv_dtype="f32") as exact, \
            llmrt.Runtime(TINY, kv_dtype="f32", quantized_activations="bf16") as bf16:
        a, _ = exact.score(ids)
        b, _ = bf16.score(ids)
    diff = max(abs(x - y) for x, y in zip(a, b))
    # The policy reaches the engine (the BF16 model's products differ); bf16 rounding (2^-9 of
    # each activation) moves log-probabilities little.
    assert 0.0 < diff < 0.5, diff


@pytest.mark.parametrize("model", ["tiny_kimi_k2_qlora_yarn", "tiny_kimi_k2_fp8"])
def test_fp8_activations_create_and_generate(model):
    """The FP8 policy reaches the library: the BF16 and the FP8 block-scaled checkpoints open
    under it and decode the golden prompt's full length."""
    from conftest import REPO
    with llmrt.Runtime(REPO / "tests" / "data" / model, kv_dtype="f32", quantized_activations="fp8") as rt:
        with rt.session(max_tokens=len(GOLDEN_IDS)) as s:
            assert len(s.generate(GOLDEN_PROMPT)) == len(GOLDEN_IDS)
            assert s.info().state == "finished"


def test_weight_memory_moves_bytes_not_results():
    from conftest import TINY
    ids = list(GOLDEN_PROMPT) + list(GOLDEN_IDS)
    with llmrt.Runtime(TINY, kv_dtype="f32", weight_memory="mapped") as mapped, \
            llmrt.Runtime(TINY, kv_dtype="f32", weight_memory="huge_pages") as copied:
        assert mapped.info().weight_memory == 1  # LLM_WEIGHT_MEMORY_MAPPED
        assert copied.info().weight_memory == 2  # LLM_WEIGHT_MEMORY_HUGE_PAGES
        assert mapped.score(ids) == copied.score(ids)
    with llmrt.Runtime(TINY) as auto:
        assert auto.info().weight_memory in (1, 2)
    with pytest.raises(llmrt.InvalidArgumentError, match="weight_memory"):
        llmrt.Runtime(TINY, weight_memory="swap")
    with pytest.raises(llmrt.InvalidArgumentError, match="weight_memory"):
        llmrt.Runtime(TINY, weight_memory=9)
