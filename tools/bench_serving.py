#!/usr/bin/env python3
"""Serving benchmark for an OpenAI-compatible endpoint (llm-server, or any other).

Sends N streaming requests, either with at most C in flight (--concurrency, a comma list runs one
row per value) or arriving as a Poisson process at R requests/s (--request-rate), and prints
throughput (requests/s, output tokens/s), time to first token (TTFT), inter-token latency (ITL:
the gap between successive streamed chunks as this client reads them), time per output token
(TPOT) and end-to-end latency, with p50/p95/p99, in the manner of SGLang's and vLLM's
bench_serving.

Prompts are word windows from the held-out KJV text (tests/data/kjv_heldout.txt), chosen with a
fixed seed; `ignore_eos` (an llm-server and vLLM extension) makes every request generate exactly
--max-tokens. The client is the standard library's asyncio over raw HTTP/1.1 (one connection per
request), so its own overhead stays small next to a fast model. Bounded in count (--num-requests)
and time (--timeout: requests still running then are counted as failed).

  python3 tools/bench_serving.py --url http://127.0.0.1:8000 --num-requests 64 --concurrency 1,8,32
"""

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

TEXT = Path(__file__).resolve().parents[1] / "tests" / "data" / "kjv_heldout.txt"


@dataclass
class Result:
    ok: bool = False
    error: str = ""
    ttft: float = 0.0
    latency: float = 0.0
    itl: list = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0


async def read_chunked_events(reader):
    """Yields the `data:` payloads of an SSE body sent with chunked transfer encoding."""
    buf = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)  # CRLF after each chunk
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    yield line[6:]


async def one_request(host, port, path, body):
    res = Result()
    payload = json.dumps(body).encode()
    start = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as e:
        res.error = f"connect: {e}"
        return res
    try:
        writer.write(b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     b"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                     % (path.encode(), host.encode(), port, len(payload)) + payload)
        await writer.drain()
        status_line = await reader.readline()
        status = int(status_line.split()[1]) if status_line else 0
        headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if status != 200:
            res.error = f"HTTP {status}: {(await reader.read(2000)).decode(errors='replace')}"
            return res
        if headers.get("transfer-encoding", "").lower() != "chunked":
            res.error = "expected a chunked event stream"
            return res
        last = None
        async for data in read_chunked_events(reader):
            if data.strip() == b"[DONE]":
                res.ok = res.output_tokens > 0 or not res.error
                break
            obj = json.loads(data)
            if "error" in obj:
                res.error = obj["error"].get("message", "error event")
                return res
            now = time.perf_counter()
            choices = obj.get("choices") or []
            text = ""
            if choices:
                c = choices[0]
                text = c.get("text") or (c.get("delta") or {}).get("content") or ""
            if text:
                if last is None:
                    res.ttft = now - start
                else:
                    res.itl.append(now - last)
                last = now
            if obj.get("usage"):
                res.output_tokens = obj["usage"]["completion_tokens"]
                res.prompt_tokens = obj["usage"]["prompt_tokens"]
        res.latency = time.perf_counter() - start
        if not res.ok and not res.error:
            res.error = "the stream ended without [DONE]"
        return res
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
        return res
    finally:
        writer.close()


def make_prompts(n, words, seed):
    toks = TEXT.read_text().split()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        i = rng.randrange(0, len(toks) - words)
        out.append(" ".join(toks[i:i + words]))
    return out


async def run_batch(args, host, port, model, prompts, concurrency, rate):
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"

    def body(p):
        b = {"model": model, "max_tokens": args.max_tokens, "temperature": args.temperature, "stream": True,
             "ignore_eos": True}
        if args.endpoint == "chat":
            b["messages"] = [{"role": "user", "content": p}]
        else:
            b["prompt"] = p
        return b

    sem = asyncio.Semaphore(concurrency) if concurrency else None
    rng = random.Random(args.seed + 1)

    async def limited(p):
        if sem is None:
            return await one_request(host, port, path, body(p))
        async with sem:
            return await one_request(host, port, path, body(p))

    start = time.perf_counter()
    tasks = []
    for p in prompts:
        tasks.append(asyncio.create_task(limited(p)))
        if rate:
            await asyncio.sleep(rng.expovariate(rate))
    done, pending = await asyncio.wait(tasks, timeout=args.timeout)
    for t in pending:
        t.cancel()
    duration = time.perf_counter() - start
    results = [t.result() for t in done if not t.cancelled()]
    results += [Result(error="timed out") for _ in pending]
    return results, duration


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(label, results, duration):
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    ttft = [r.ttft * 1000 for r in ok]
    itl = [x * 1000 for r in ok for x in r.itl]
    e2e = [r.latency * 1000 for r in ok]
    # Time per output token after the first, per request: unlike ITL it does not depend on how
    # the tokens were grouped into chunks or read by this client.
    tpot = [(r.latency - r.ttft) * 1000 / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {
        "label": label, "completed": len(ok), "failed": len(results) - len(ok), "duration_s": duration,
        "req_per_s": len(ok) / duration if duration else 0.0, "output_tok_per_s": out_tokens / duration if duration else 0,
        "output_tokens": out_tokens, "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "ttft_mean": statistics.fmean(ttft) if ttft else float("nan"),
        "ttft_p50": pct(ttft, 50), "ttft_p95": pct(ttft, 95), "ttft_p99": pct(ttft, 99),
        "itl_mean": statistics.fmean(itl) if itl else float("nan"),
        "itl_p50": pct(itl, 50), "itl_p95": pct(itl, 95), "itl_p99": pct(itl, 99),
        "tpot_p50": pct(tpot, 50), "tpot_p95": pct(tpot, 95), "tpot_p99": pct(tpot, 99),
        "e2e_p50": pct(e2e, 50), "e2e_p99": pct(e2e, 99),
        "errors": sorted({r.error for r in results if not r.ok})[:3],
    }


def print_table(rows):
    cols = [("label", "load", "{}"), ("completed", "ok", "{}"), ("failed", "fail", "{}"),
            ("req_per_s", "req/s", "{:.1f}"), ("output_tok_per_s", "out tok/s", "{:.0f}"),
            ("ttft_p50", "TTFT p50", "{:.1f}"), ("ttft_p95", "p95", "{:.1f}"), ("ttft_p99", "p99", "{:.1f}"),
            ("itl_p50", "ITL p50", "{:.2f}"), ("itl_p95", "p95", "{:.2f}"), ("itl_p99", "p99", "{:.2f}"),
            ("tpot_p50", "TPOT p50", "{:.2f}"), ("tpot_p99", "p99", "{:.2f}"),
            ("e2e_p50", "E2E p50", "{:.0f}")]
    cells = [[h for _, h, _ in cols]] + [[f.format(r[k]) for k, _, f in cols] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    print("| " + " | ".join(h.rjust(w) for h, w in zip(cells[0], widths)) + " |")
    print("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    for c in cells[1:]:
        print("| " + " | ".join(v.rjust(w) for v, w in zip(c, widths)) + " |")
    print("(ms; TTFT: request sent to first text chunk; ITL: between chunks as read; TPOT: per request, "
          "(latency - TTFT) / (output tokens - 1))")
    for r in rows:
        if r["errors"]:
            print(f"{r['label']}: errors: {r['errors']}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", help="default: the first of GET /v1/models")
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--concurrency", default="8", help="in-flight limit; a comma list runs one row per value")
    ap.add_argument("--request-rate", type=float, default=0.0,
                    help="Poisson arrivals per second instead of a concurrency limit (0: off)")
    ap.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (ignore_eos)")
    ap.add_argument("--prompt-words", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2, help="requests sent first and not measured")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per row; later requests fail")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()

    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    model = args.model
    if model is None:
        with urllib.request.urlopen(args.url + "/v1/models", timeout=30) as r:
            model = json.load(r)["data"][0]["id"]
    prompts = make_prompts(args.num_requests, args.prompt_words, args.seed)
    if args.warmup:
        asyncio.run(run_batch(args, host, port, model, prompts[:args.warmup], args.warmup, 0))
    rows = []
    if args.request_rate > 0:
        loads = [("rate %g/s" % args.request_rate, 0, args.request_rate)]
    else:
        loads = [("concurrency %d" % int(c), int(c), 0) for c in args.concurrency.split(",")]
    for label, conc, rate in loads:
        results, duration = asyncio.run(run_batch(args, host, port, model, prompts, conc, rate))
        rows.append(summarize(label, results, duration))
    print(f"model {model}, {args.endpoint}, {args.num_requests} requests of {args.prompt_words} words "
          f"-> {args.max_tokens} tokens")
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["failed"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
