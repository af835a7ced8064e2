"""Generation through the official openai client: equal to llm-run, streaming equal to
non-streaming, 32 concurrent streams equal to their solo runs."""

import json
import threading

import pytest

from conftest import GLM, KIMI, Server, ids_prompt, llm_run

PROMPTS = [
    "In the beginning",
    "And the LORD said unto Moses",
    "Blessed are the meek",
    "The LORD is my shepherd",
]


def test_models_and_health(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == [server.name]
    assert server.client().models.retrieve(server.name).id == server.name
    status, _, body = server.raw("GET", "/health")
    assert status == 200 and b"ok" in body


@pytest.mark.parametrize("model", [KIMI, GLM], ids=["kimi", "glm4"])
def test_greedy_completion_equals_llm_run(model):
    s = Server(model)
    try:
        for prompt in PROMPTS[:2]:
            want = llm_run(model, "--prompt", prompt, "--max-tokens", 40)
            r = s.client().completions.create(model=s.name, prompt=prompt, max_tokens=40, temperature=0)
            assert prompt + r.choices[0].text + "\n" == want
            assert r.usage.completion_tokens == 40
            assert r.choices[0].finish_reason == "length"
    finally:
        s.close()


@pytest.mark.parametrize("model", [KIMI, GLM], ids=["kimi", "glm4"])
def test_greedy_chat_equals_llm_run(model):
    s = Server(model)
    try:
        want = llm_run(model, "--chat", "--prompt", "Who made the heavens?", "--max-tokens", 30)
        r = s.client().chat.completions.create(
            model=s.name, messages=[{"role": "user", "content": "Who made the heavens?"}], max_tokens=30,
            temperature=0)
        assert r.choices[0].message.role == "assistant"
        assert r.choices[0].message.content + "\n" == want
    finally:
        s.close()


def test_seeded_sampling_equals_llm_run(server):
    want = llm_run(KIMI, "--prompt", "And God said", "--max-tokens", 30, "--temperature", 0.8, "--seed", 7)
    c = server.client()
    a = c.completions.create(model=server.name, prompt="And God said", max_tokens=30, temperature=0.8, seed=7)
    b = c.completions.create(model=server.name, prompt="And God said", max_tokens=30, temperature=0.8, seed=7)
    assert "And God said" + a.choices[0].text + "\n" == want
    assert a.choices[0].text == b.choices[0].text


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_stream_concatenates_to_non_stream(server, chat):
    c = server.client()
    for max_tokens in (1, 25, 60):
        if chat:
            kw = dict(model=server.name, messages=[{"role": "user", "content": "Praise the LORD"}], max_tokens=max_tokens,
                      temperature=0)
            full = c.chat.completions.create(**kw)
            chunks = list(c.chat.completions.create(stream=True, **kw))
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            assert chunks[0].choices[0].delta.role == "assistant"
            want = full.choices[0].message.content
        else:
            kw = dict(model=server.name, prompt="Thus saith the LORD", max_tokens=max_tokens, temperature=0)
            full = c.completions.create(**kw)
            chunks = list(c.completions.create(stream=True, **kw))
            text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
            want = full.choices[0].text
        assert text == want
        final = chunks[-1]
        assert final.choices[0].finish_reason == full.choices[0].finish_reason
        # usage rides on the final chunk
        assert final.usage.completion_tokens == full.usage.completion_tokens == max_tokens
        assert final.usage.prompt_tokens == full.usage.prompt_tokens
        assert all(ch.usage is None for ch in chunks[:-1])


def test_stream_options_include_usage(server):
    chunks = list(server.client().completions.create(model=server.name, prompt="Amen", max_tokens=5, temperature=0,
                                                     stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_stop_strings(server):
    c = server.client()
    full = c.completions.create(model=server.name, prompt="In the beginning", max_tokens=40, temperature=0)
    text = full.choices[0].text
    word = " world"
    assert word in text
    before = server.metrics().get('llmrt_sessions_cancelled_total{reason="stop_string"}', 0)
    r = c.completions.create(model=server.name, prompt="In the beginning", max_tokens=40, temperature=0, stop=[word, "zzz"])
    assert r.choices[0].text == text[: text.index(word)]
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < 40
    # the session was cancelled at the stop string rather than left to run to max_tokens
    assert server.metrics()['llmrt_sessions_cancelled_total{reason="stop_string"}'] == before + 1
    chunks = list(c.completions.create(model=server.name, prompt="In the beginning", max_tokens=40, temperature=0,
                                       stop=word, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == r.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert server.wait_metric("llmrt_kv_pages_used", lambda v: v == 0) == 0


def test_token_id_prompt_equals_llm_run(server):
    status, _, body = server.raw("POST", "/tokenize", {"model": server.name, "prompt": "In the beginning"})
    assert status == 200
    ids = json.loads(body)["tokens"]
    assert len(ids) == 3
    want = [int(t) for t in llm_run(KIMI, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", 12).split()]
    c = server.client()
    r = c.completions.create(model=server.name, prompt=ids, max_tokens=12, temperature=0)
    t = c.completions.create(model=server.name, prompt="In the beginning", max_tokens=12, temperature=0)
    status, _, body = server.raw("POST", "/detokenize", {"model": server.name, "tokens": want})
    assert status == 200
    assert r.choices[0].text == t.choices[0].text == json.loads(body)["prompt"]
    assert r.usage.prompt_tokens == 3 and r.usage.completion_tokens == 12


def test_32_concurrent_streams_equal_solo(server):
    c = server.client()
    jobs = []
    for i in range(32):
        prompt = PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS))
        jobs.append((prompt, 20 + (i * 7) % 41))
    solo = [c.completions.create(model=server.name, prompt=p, max_tokens=n, temperature=0).choices[0].text
            for p, n in jobs]
    before = server.metrics()
    results = [None] * len(jobs)
    errors = []
    barrier = threading.Barrier(len(jobs))

    def run(i):
        try:
            client = server.client()
            barrier.wait()
            p, n = jobs[i]
            stream = client.completions.create(model=server.name, prompt=p, max_tokens=n, temperature=0, stream=True)
            parts = []
            usage = None
            for ch in stream:
                parts.append(ch.choices[0].text)
                usage = ch.usage or usage
            results[i] = ("".join(parts), usage.completion_tokens)
        except Exception as e:  # surfaced below with the job's index
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for i, (p, n) in enumerate(jobs):
        assert results[i] == (solo[i], n), i
    after = server.metrics()
    # Continuous batching across HTTP clients: some steps advanced several sessions at once.
    steps = after["llmrt_step_batch_sessions_count"] - before["llmrt_step_batch_sessions_count"]
    single = after['llmrt_step_batch_sessions_bucket{le="1"}'] - before['llmrt_step_batch_sessions_bucket{le="1"}']
    assert steps - single > 0
    assert after["llmrt_kv_pages_used"] == 0


def test_prefix_sharing_shows_in_metrics(server):
    c = server.client()
    prompt = ids_prompt(64, 5)
    before = server.metrics()
    stream = iter(c.completions.create(model=server.name, prompt=prompt, max_tokens=600, temperature=0, stream=True))
    next(stream)  # the first request's prompt pages exist now
    solo = c.completions.create(model=server.name, prompt=prompt, max_tokens=5, temperature=0)
    rest = list(stream)
    assert rest[-1].usage.completion_tokens == 600
    after = server.metrics()
    # The second request started on the first one's full prompt pages (3 of 16 tokens: the
    # partial last page is recomputed).
    hits = after["llmrt_prefix_cache_hit_tokens_total"] - before["llmrt_prefix_cache_hit_tokens_total"]
    assert hits >= 48
    assert 0 < after["llmrt_prefix_cache_hit_rate"] <= 1
    assert solo.usage.prompt_tokens == 64


def test_tensor_parallel_equals_llm_run(start_server):
    s = start_server("--tp", 2)
    want = llm_run(KIMI, "--prompt", "In the beginning", "--max-tokens", 40, "--tp", 2)
    r = s.client().completions.create(model=s.name, prompt="In the beginning", max_tokens=40, temperature=0)
    assert "In the beginning" + r.choices[0].text + "\n" == want


def test_fp8_kv_cache_equals_llm_run(start_server):
    s = start_server("--kv-dtype", "fp8", "--kv-integrity", "tags", "--tp", 1)
    want = llm_run(KIMI, "--prompt", "In the beginning", "--max-tokens", 60, "--kv-dtype", "fp8")
    r = s.client().completions.create(model=s.name, prompt="In the beginning", max_tokens=60, temperature=0)
    assert "In the beginning" + r.choices[0].text + "\n" == want
    # FP8 rounding changes this continuation: the option reached the runtime.
    assert want != llm_run(KIMI, "--prompt", "In the beginning", "--max-tokens", 60)


def test_expert_parallel_int4_int8_equals_llm_run(start_server):
    # --ep is a flag (it takes no value) wherever it stands; the weight and activation policies
    # reach the runtime: the server decodes what llm-run decodes with the same options.
    opts = ("--decode-weights", "int4-g32", "--activations", "int8", "--tp", 2, "--ep")
    s = start_server(*opts)
    prompt = "And God said"
    want = llm_run(KIMI, "--prompt", prompt, "--max-tokens", 60, *opts)
    r = s.client().completions.create(model=s.name, prompt=prompt, max_tokens=60, temperature=0)
    assert prompt + r.choices[0].text + "\n" == want
    # This continuation changes with INT4 experts, and again with INT8 activations on them.
    int4 = llm_run(KIMI, "--prompt", prompt, "--max-tokens", 60, *opts[:2], "--tp", 2, "--ep")
    assert want != int4
    assert int4 != llm_run(KIMI, "--prompt", prompt, "--max-tokens", 60, "--tp", 2, "--ep")


def test_developer_role_is_the_system_role(server):
    # The API's newer name for system messages: the same prompt as "system".
    def ids(role):
        status, _, resp = server.raw("POST", "/tokenize", {"model": server.name, "messages": [
            {"role": role, "content": "Speak as the scribes."}, {"role": "user", "content": "Who made the heavens?"}]})
        assert status == 200, resp
        return json.loads(resp)["tokens"]
    assert ids("developer") == ids("system")
    r = server.client().chat.completions.create(
        model=server.name, messages=[{"role": "developer", "content": "Speak as the scribes."},
                                     {"role": "user", "content": "Who made the heavens?"}], max_tokens=4, temperature=0)
    assert r.usage.completion_tokens == 4
