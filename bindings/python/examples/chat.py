#!/usr/bin/env python3
"""A small generate / chat command line over llmrt.

  chat.py --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--seed S]
      continues TEXT and streams the continuation
  chat.py --model DIR --chat TEXT [--system TEXT] [...]
      one chat turn: the assistant's reply to TEXT
  chat.py --model DIR --interactive
      a conversation on stdin; each line is a user turn (an empty line or EOF ends it)

Ctrl-C during a reply cancels that generation (llm_session_cancel; its KV pages are released) and
keeps the conversation going.
"""

import argparse
import sys

import llmrt


def stream_out(stream):
    for tok in stream:
        if tok.text:
            sys.stdout.write(tok.text)
            sys.stdout.flush()
    sys.stdout.write("\n")
    return stream.finish_reason


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json, safetensors, tokenizer)")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prompt", help="text to continue")
    mode.add_argument("--chat", help="one user message to answer")
    mode.add_argument("--interactive", action="store_true", help="chat on stdin")
    ap.add_argument("--system", help="system message for --chat / --interactive")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-dtype", default="auto", choices=["auto", "bf16", "f32", "fp8", "fp8_tiled"])
    args = ap.parse_args()
    sampling = dict(temperature=args.temperature, top_p=args.top_p, seed=args.seed)

    try:
        rt = llmrt.Runtime(args.model, kv_dtype=args.kv_dtype)
    except llmrt.LlmrtError as e:
        print(f"chat.py: {e}", file=sys.stderr)
        return 1
    with rt:
        if args.prompt is not None:
            sys.stdout.write(args.prompt)
            reason = stream_out(rt.stream(args.prompt, args.max_tokens, **sampling))
            print(f"[{reason}]", file=sys.stderr)
            return 0
        messages = [{"role": "system", "content": args.system}] if args.system else []
        turns = [args.chat] if args.chat is not None else None
        while True:
            if turns is not None:
                if not turns:
                    return 0
                text = turns.pop(0)
            else:
                sys.stdout.write("> ")
                sys.stdout.flush()
                text = sys.stdin.readline().strip()
                if not text:
                    return 0
            messages.append({"role": "user", "content": text})
            stream = rt.chat_stream(messages, args.max_tokens, **sampling)
            try:
                stream_out(stream)
            except KeyboardInterrupt:
                stream.close()  # cancels the generation and releases its KV pages
                print("\n[cancelled]", file=sys.stderr)
            messages.append({"role": "assistant", "content": stream.text or ""})
            print(f"[{stream.finish_reason}]", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
