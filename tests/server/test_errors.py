"""Bad input gets its HTTP status and an OpenAI-style error body, and the server keeps serving."""

import json
import socket
import threading
import time

import openai
import pytest

from conftest import error_of, ids_prompt


def assert_still_serving(server):
    r = server.client().completions.create(model=server.name, prompt="And", max_tokens=3, temperature=0)
    assert r.usage.completion_tokens == 3


@pytest.mark.parametrize("body,param", [
    (b"{not json", None),
    (b"", None),
    (b"[1, 2]", None),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "max_tokens": "many"}', "max_tokens"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "max_tokens": 0}', "max_tokens"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "temperature": 3}', "temperature"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "top_p": 0}', "top_p"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "n": 2}', "n"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "logprobs": 3}', "logprobs"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "logprobs": 0}', "logprobs"),  # the sampled token's
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "stop": [1]}', "stop"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": ["a", "b"]}', "prompt"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": [5000]}', "prompt"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": [-1]}', "prompt"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": ""}', "prompt"),
    (b'{"model": "kimi-k2-kjv-tiny"}', "prompt"),
    (b'{"prompt": "a"}', "model"),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "a", "seed": 1e400}', None),
    (b'{"model": "kimi-k2-kjv-tiny", "prompt": "\xff\xfe"}', None),
    (b'[' * 100000, None),
])
def test_malformed_completion_requests_400(server, body, param):
    status, headers, resp = server.raw("POST", "/v1/completions", body)
    assert status == 400, resp
    e = error_of(resp)
    assert e["type"] == "invalid_request_error"
    if param is not None:
        assert e["param"] == param
    assert_still_serving(server)


@pytest.mark.parametrize("messages,param", [
    ([], "messages"),
    ([{"content": "hi"}], "messages[0].role"),
    ([{"role": "user"}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "wizard", "content": "hi"}], "messages"),
])
def test_malformed_chat_requests_400(server, messages, param):
    status, _, resp = server.raw("POST", "/v1/chat/completions", {"model": server.name, "messages": messages})
    assert status == 400, resp
    assert error_of(resp)["param"] == param
    assert_still_serving(server)


def test_malformed_json_through_openai_client(server):
    # The official client sends whatever extra fields it is given: a wrongly typed one is a 400.
    with pytest.raises(openai.BadRequestError) as ei:
        server.client().completions.create(model=server.name, prompt="a", extra_body={"temperature": "hot"})
    assert ei.value.status_code == 400
    assert ei.value.body["param"] == "temperature"
    assert_still_serving(server)


def test_unknown_model_404(server):
    with pytest.raises(openai.NotFoundError) as ei:
        server.client().completions.create(model="gpt-4", prompt="a")
    assert ei.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        server.client().chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "a"}])
    with pytest.raises(openai.NotFoundError):
        server.client().models.retrieve("gpt-4")
    status, _, body = server.raw("GET", "/v1/nothing")
    assert status == 404 and error_of(body)["code"] == "not_found"
    assert_still_serving(server)


def test_prompt_longer_than_context_400(server):
    c = server.client()
    with pytest.raises(openai.BadRequestError) as ei:
        c.completions.create(model=server.name, prompt=ids_prompt(1024), max_tokens=1)
    assert ei.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as ei:
        c.completions.create(model=server.name, prompt="In the beginning " * 400, max_tokens=1)
    assert ei.value.body["code"] == "context_length_exceeded"
    # prompt + max_tokens past the context
    with pytest.raises(openai.BadRequestError) as ei:
        c.completions.create(model=server.name, prompt=ids_prompt(1000), max_tokens=25)
    assert ei.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(model=server.name, messages=[{"role": "user", "content": "In the beginning " * 400}])
    assert ei.value.body["code"] == "context_length_exceeded"
    # the largest prompt that fits still runs
    r = c.completions.create(model=server.name, prompt=ids_prompt(1000), max_tokens=24, temperature=0)
    assert r.usage.completion_tokens == 24
    assert_still_serving(server)


def test_debug_endpoint_absent_without_test_hooks(server):
    status, _, body = server.raw("POST", "/debug/corrupt", {"user": "x"})
    assert status == 404
    error_of(body)


def test_oversize_body_413(start_server):
    s = start_server("--max-body-bytes", 4096)
    with pytest.raises(openai.APIStatusError) as ei:
        s.client().completions.create(model=s.name, prompt="x" * 5000, max_tokens=1)
    assert ei.value.status_code == 413
    assert ei.value.body["code"] == "request_too_large"
    r = s.client().completions.create(model=s.name, prompt="In the beginning " * 60, max_tokens=1)
    assert r.usage.completion_tokens == 1


def test_too_many_sessions_429(start_server):
    s = start_server("--max-sessions", 1)
    c = s.client()
    # One long generation holds the only session; the first chunk proves it is live.
    stream = c.completions.create(model=s.name, prompt="And", max_tokens=1000, temperature=0, stream=True)
    it = iter(stream)
    next(it)
    with pytest.raises(openai.RateLimitError) as ei:
        s.client().completions.create(model=s.name, prompt="And", max_tokens=3)
    assert ei.value.status_code == 429
    assert ei.value.body["code"] == "too_many_sessions"
    assert ei.value.response.headers.get("retry-after") == "1"
    rest = list(it)
    assert rest[-1].usage.completion_tokens == 1000
    assert_still_serving(s)


# The shipped Kimi model stores 1152 bytes of KV per token: 16-token pages of 18 KiB, so a
# 0.25 MiB budget holds 14 pages (224 tokens).
SMALL_KV = ("--kv-budget-mib", 0.25)


def test_kv_cache_holds_14_pages(start_server):
    s = start_server(*SMALL_KV)
    assert s.metrics()["llmrt_kv_pages_total"] == 14


def test_kv_exhausted_fail_policy_503(start_server):
    s = start_server(*SMALL_KV, "--kv-pressure", "fail")
    c = s.client()
    # A prompt larger than the whole cache fails at prefill: 503 with Retry-After.
    with pytest.raises(openai.InternalServerError) as ei:
        c.completions.create(model=s.name, prompt=ids_prompt(300), max_tokens=10)
    assert ei.value.status_code == 503
    assert ei.value.body["code"] == "kv_cache_exhausted"
    assert ei.value.response.headers.get("retry-after") == "1"
    # A prompt that fits but whose generation outgrows the cache: 503 without streaming...
    with pytest.raises(openai.InternalServerError) as ei:
        c.completions.create(model=s.name, prompt=ids_prompt(200), max_tokens=100, temperature=0)
    assert ei.value.status_code == 503
    # ... and an error event after the tokens that fitted when streaming (the status line was sent).
    got = []
    with pytest.raises(openai.APIError) as ei:
        for ch in c.completions.create(model=s.name, prompt=ids_prompt(200), max_tokens=100, temperature=0,
                                       stream=True):
            got.append(ch.choices[0].text)
    assert ei.value.body["code"] == "kv_cache_exhausted"
    assert got
    assert s.wait_metric("llmrt_kv_pages_used", lambda v: v == 0) == 0
    assert s.metrics()['llmrt_sessions_failed_total{status="LLM_ERR_KV_EXHAUSTED"}'] == 3
    assert_still_serving(s)


def finished(metrics):
    return sum(v for k, v in metrics.items() if k.startswith("llmrt_sessions_finished_total"))


def test_kv_exhausted_queue_policy_waits(start_server):
    s = start_server(*SMALL_KV, "--kv-pressure", "queue")
    c = s.client()
    # The first request reserves all 14 pages (16 + 200 tokens); the second (100 + 40 tokens,
    # 9 pages) cannot be admitted beside it: under the queue policy it waits for the first to
    # finish, then runs as it would alone (under the fail policy one of them would get 503).
    jobs = [(ids_prompt(16, 1), 200), (ids_prompt(100, 2), 40)]
    solo = [c.completions.create(model=s.name, prompt=p, max_tokens=n, temperature=0).choices[0].text for p, n in jobs]
    for attempt in range(3):
        texts = {}
        started = threading.Event()

        def run(i):
            parts = []
            for ch in s.client().completions.create(model=s.name, prompt=jobs[i][0], max_tokens=jobs[i][1],
                                                    temperature=0, stream=True):
                started.set()
                parts.append(ch.choices[0].text)
            texts[i] = "".join(parts)

        before = s.metrics()
        first = threading.Thread(target=run, args=(0,))
        first.start()
        assert started.wait(30)
        second = threading.Thread(target=run, args=(1,))
        second.start()
        # A snapshot begun after the second request was admitted (its prompt counted): /metrics
        # renders the live and running gauges before the finished counters, so if the first had
        # not finished then, both were live and only the first could run.
        prompts = before["llmrt_prompt_tokens_total"] + 116
        while s.metrics()["llmrt_prompt_tokens_total"] < prompts:
            time.sleep(0.001)
        snap = s.metrics()
        first.join()
        second.join()
        assert texts == {0: solo[0], 1: solo[1]}
        if finished(snap) == finished(before):
            assert snap["llmrt_requests_waiting"] >= 1
            assert snap["llmrt_requests_running"] <= 1
            break
    else:
        pytest.fail("the first request (200 tokens) finished three times before the second was admitted")
    # A request that can never fit the cache is refused rather than left waiting forever.
    with pytest.raises(openai.InternalServerError) as ei:
        c.completions.create(model=s.name, prompt=ids_prompt(200), max_tokens=100)
    assert ei.value.status_code == 503
    assert_still_serving(s)


def test_kv_pressure_preempt_policy_runs_all(start_server):
    s = start_server(*SMALL_KV, "--kv-pressure", "preempt")
    c = s.client()
    jobs = [(ids_prompt(60, i), 60) for i in range(3)]
    solo = [c.completions.create(model=s.name, prompt=p, max_tokens=n, temperature=0).choices[0].text for p, n in jobs]
    out = [None] * 3

    def run(i):
        out[i] = s.client().completions.create(model=s.name, prompt=jobs[i][0], max_tokens=jobs[i][1],
                                               temperature=0).choices[0].text

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == solo


def read_first_event(sock):
    buf = b""
    while b"data: " not in buf:
        chunk = sock.recv(4096)
        assert chunk, buf
        buf += chunk


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non_stream"])
def test_client_disconnect_frees_pages(server, stream):
    before = server.metrics()
    body = json.dumps({"model": server.name, "prompt": "In the beginning", "max_tokens": 1000, "temperature": 0,
                       "stream": stream}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    if stream:
        read_first_event(sock)
    else:
        server.wait_metric("llmrt_generation_tokens_total", lambda v: v > before["llmrt_generation_tokens_total"])
    at_close = server.metrics()
    assert at_close["llmrt_kv_pages_used"] > 0
    sock.close()
    key = 'llmrt_sessions_cancelled_total{reason="disconnect"}'
    assert server.wait_metric(key, lambda v: v == before.get(key, 0) + 1) == before.get(key, 0) + 1
    assert server.wait_metric("llmrt_kv_pages_used", lambda v: v == 0) == 0
    after = server.metrics()
    # Generation stopped long before max_tokens, a few steps after the close (the request
    # checks its connection at every token; the bound leaves room for a loaded machine).
    assert after["llmrt_generation_tokens_total"] - before["llmrt_generation_tokens_total"] < 1000
    assert after["llmrt_generation_tokens_total"] - at_close["llmrt_generation_tokens_total"] < 200
    assert server.wait_metric("llmrt_requests_running", lambda v: v == 0) == 0
    assert server.wait_metric("llmrt_requests_waiting", lambda v: v == 0) == 0
    assert_still_serving(server)


def test_tp_that_does_not_split_the_model_refused():
    import subprocess
    from conftest import KIMI, SERVER
    r = subprocess.run([str(SERVER), "--model", str(KIMI), "--tp", "3", "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "LLM_ERR_INVALID_ARGUMENT" in r.stderr and "tensor_parallel 3" in r.stderr


@pytest.mark.parametrize("headers", [b"Transfer-Encoding: chunked\r\n", b""], ids=["chunked", "no_length"])
@pytest.mark.parametrize("body", [b"1000\r\n" + b"x" * 4096, b"10\r\n" + b"x" * 16 + b"\r\n", b""],
                         ids=["large", "small", "none"])
def test_body_without_content_length_411(start_server, headers, body):
    # cpp-httplib would read such a body to its end whatever its size: it is refused unread, and
    # the answer reaches the client whatever is left unread (none, a little, more than a page).
    s = start_server("--max-body-bytes", 4096)
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
                 b"\r\n" + body)
    buf = b""
    sock.settimeout(10)
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break  # the server closed the connection after its answer
        buf += chunk
    sock.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 411"), buf[:200]
    assert error_of(body)["code"] == "length_required"
    assert_still_serving(s)


def test_get_on_a_post_url_405(server):
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        status, headers, resp = server.raw("GET", path)
        assert status == 405, resp
        assert headers.get("Allow") == "POST"
        assert error_of(resp)["code"] == "method_not_allowed"
    status, _, resp = server.raw("GET", "/v1/nothing")
    assert status == 404 and error_of(resp)["code"] == "not_found"


def test_stream_options_without_stream_400(server):
    status, _, resp = server.raw("POST", "/v1/completions", {"model": server.name, "prompt": "a",
                                                             "stream_options": {"include_usage": True}})
    assert status == 400, resp
    assert error_of(resp)["param"] == "stream_options"


def test_max_completion_tokens_past_the_context_names_its_field(server):
    status, _, resp = server.raw("POST", "/v1/chat/completions", {
        "model": server.name, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5000})
    assert status == 400, resp
    e = error_of(resp)
    assert e["code"] == "context_length_exceeded" and e["param"] == "max_completion_tokens"
    assert "max_completion_tokens asks for 5000" in e["message"]
