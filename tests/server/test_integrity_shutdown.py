"""A KV integrity violation fails that request alone (500); SIGTERM drains in-flight requests,
or cancels them cleanly when the drain time is up."""

import signal
import threading
import time

import openai
import pytest

from conftest import error_of, ids_prompt


@pytest.mark.parametrize("op", ["free_mapped_page", "corrupt_entry"])
def test_integrity_violation_500_for_that_request_only(start_server, op):
    s = start_server("--kv-integrity", "tags", "--enable-test-hooks")
    c = s.client()
    bystander_prompt = ids_prompt(40, 7)
    solo = c.completions.create(model=s.name, prompt=bystander_prompt, max_tokens=300, temperature=0).choices[0].text
    outcome = {}

    def victim():
        try:
            s.client().completions.create(model=s.name, prompt=ids_prompt(40, 3), max_tokens=900, temperature=0,
                                          user="victim")
            outcome["victim"] = "finished"
        except openai.APIStatusError as e:
            outcome["victim"] = e

    def bystander():
        parts = [ch.choices[0].text for ch in s.client().completions.create(
            model=s.name, prompt=bystander_prompt, max_tokens=300, temperature=0, stream=True, user="bystander")]
        outcome["bystander"] = "".join(parts)

    threads = [threading.Thread(target=victim), threading.Thread(target=bystander)]
    for t in threads:
        t.start()
    # Corrupt the victim's first page table entry once it is live and holds a page. Page 13 is
    # one neither session maps at that point (each holds at most a few pages).
    body = {"user": "victim", "op": op, "entry": 0, "page": 13}
    deadline = time.monotonic() + 30
    while True:
        status, _, resp = s.raw("POST", "/debug/corrupt", body)
        if status == 200 or time.monotonic() > deadline:
            break
        assert status in (404, 409), resp  # not live yet, or no page yet
        error_of(resp)
        time.sleep(0.001)
    assert status == 200, resp
    for t in threads:
        t.join(timeout=60)
    e = outcome["victim"]
    assert isinstance(e, openai.InternalServerError), e
    assert e.status_code == 500
    assert e.body["code"] == "kv_integrity_violation"
    assert outcome["bystander"] == solo
    m = s.metrics()
    assert m["llmrt_kv_integrity_violations_total"] == 1
    assert m['llmrt_sessions_failed_total{status="LLM_ERR_KV_INTEGRITY"}'] == 1
    assert s.wait_metric("llmrt_kv_pages_used", lambda v: v == 0) == 0
    r = c.completions.create(model=s.name, prompt=bystander_prompt, max_tokens=300, temperature=0)
    assert r.choices[0].text == solo


def test_sigterm_drains_in_flight_streams(start_server):
    s = start_server()
    c = s.client()
    stream = iter(c.completions.create(model=s.name, prompt="In the beginning", max_tokens=800, temperature=0,
                                       stream=True))
    first = next(stream)
    s.proc.send_signal(signal.SIGTERM)
    # Draining: new generations are refused and /health reports it, while the stream goes on.
    deadline = time.monotonic() + 10
    while s.raw("GET", "/health")[0] != 503 and time.monotonic() < deadline:
        time.sleep(0.001)
    status, _, body = s.raw("GET", "/health")
    assert status == 503
    status, _, body = s.raw("POST", "/v1/completions", {"model": s.name, "prompt": "a", "max_tokens": 1})
    assert status == 503 and error_of(body)["code"] == "shutting_down"
    rest = list(stream)
    assert len(rest) >= 2  # text chunks, then the final chunk
    assert rest[-1].choices[0].finish_reason == "length"
    assert rest[-1].usage.completion_tokens == 800
    assert s.stop() == 0


def test_sigterm_after_drain_timeout_cancels_cleanly(start_server):
    s = start_server("--shutdown-timeout", 0)
    c = s.client()
    stream = iter(c.completions.create(model=s.name, prompt="In the beginning", max_tokens=1000, temperature=0,
                                       stream=True))
    next(stream)
    # Queued behind the stream's connection: a non-streaming request in flight too.
    outcome = {}

    def waiter():
        try:
            s.client().completions.create(model=s.name, prompt="And", max_tokens=1000, temperature=0)
            outcome["r"] = "finished"
        except openai.APIStatusError as e:
            outcome["r"] = e

    t = threading.Thread(target=waiter)
    t.start()
    s.wait_metric("llmrt_http_generations_in_flight", lambda v: v >= 2)
    s.proc.send_signal(signal.SIGTERM)
    with pytest.raises(openai.APIError) as ei:
        list(stream)
    assert ei.value.body["code"] == "shutting_down"
    t.join(timeout=30)
    assert outcome["r"] == "finished" or outcome["r"].status_code == 503
    assert s.stop() == 0
    assert "cancelling" in s.log_text()
