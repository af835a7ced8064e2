#!/usr/bin/env python3
"""Decode throughput through the binding: one stream, then N streams from N threads (batched by
the runtime), then N streams one after another. Greedy, fixed lengths.

  throughput.py --model DIR [--sessions 8] [--tokens 128] [--threads 0]
"""

import argparse
import threading
import time

import llmrt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="library worker threads (0: one per core)")
    args = ap.parse_args()
    with llmrt.Runtime(args.model, num_threads=args.threads) as rt:
        ids = rt.tokenizer.encode("In the beginning")
        rt.session(max_tokens=8).generate(ids)  # warm up

        def one():
            with rt.session(max_tokens=args.tokens) as s:
                return len(s.generate(ids))

        t0 = time.perf_counter()
        n = one()
        t1 = time.perf_counter()
        print(f"1 stream:                   {n / (t1 - t0):8.1f} tokens/s")

        counts = [0] * args.sessions

        def worker(i):
            counts[i] = one()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.sessions)]
        steps = rt.steps_run
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t1 = time.perf_counter()
        print(f"{args.sessions} streams, {args.sessions} threads: {sum(counts) / (t1 - t0):8.1f} tokens/s "
              f"({rt.steps_run - steps} steps for {sum(counts)} tokens)")

        t0 = time.perf_counter()
        total = sum(one() for _ in range(args.sessions))
        t1 = time.perf_counter()
        print(f"{args.sessions} streams, one by one:    {total / (t1 - t0):8.1f} tokens/s")


if __name__ == "__main__":
    main()
