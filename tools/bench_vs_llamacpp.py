#!/usr/bin/env python3
"""llmrt's CPU backend against llama.cpp on the same generated checkpoints, side by side.

  python3 tools/bench_vs_llamacpp.py LLAMA_DIR [--repeats 3] [--batch1-repeats 8] [--threads 2] [--preset k2]
        [--layers 4] [--hidden 4096] [--depth 4096] [--work /tmp/llmrt-vs] [--build build] [--venv DIR] [--out FILE]

LLAMA_DIR is a llama.cpp source tree (with convert_hf_to_gguf.py; it is built in LLAMA_DIR/build
when its tools are missing: cmake Release, GGML_NATIVE=ON, only llama-bench, llama-batched-bench,
llama-quantize, llama-tokenize) or a build directory of one (its CMakeCache.txt names the source).
Nothing of llama.cpp is copied into this repository.

Setup (once; the script does it when --venv does not exist yet): a Python virtual environment
outside the repository with what llama.cpp's converter imports:
    python3 -m venv VENV
    VENV/bin/pip install torch transformers numpy sentencepiece protobuf LLAMA_SRC/gguf-py
(default VENV: LLAMA_SRC/../llamacpp-venv). llmrt's build directory (--build, default build/)
must hold samples/llm-bench, samples/llm-make-bench-model and samples/llm-run.

What it does:
 1. llm-make-bench-model writes the checkpoints (preset k2: Kimi K2's DeepseekV3 structure, 4
    layers of hidden 4096, random weights, ~2.3 GB BF16) in BF16, FP8 (128x128 blocks, every
    decoder linear but the router) and INT4 g32 (every decoder linear but kv_b_proj and the
    router), each with a small GLM-format tokenizer.
 2. llama.cpp's convert_hf_to_gguf.py turns the BF16 checkpoint into a BF16 GGUF (through
    tools/bench_vs/convert_with_llamacpp.py, which only names the tokenizer's pre-tokenizer);
    llama-quantize makes Q8_0 and Q4_0 from it, keeping token_embd and output in BF16 as llmrt's
    quantized checkpoints keep embed_tokens and lm_head, and attn_k_b / attn_v_b (kv_b_proj) in
    BF16 as llmrt's INT4 checkpoint does (quantized, llama.cpp aborts on them).
 3. Checks: llama-tokenize and llm-bench --tokens give the same ids for a text; llama.cpp
    (tools/bench_vs/llamacpp_greedy.c, built against the llama.cpp given) and llm-run give greedy
    tokens from the same prompt ids on the BF16 model (reported as the length of the common
    prefix: with random weights the logits have near-ties, and the engines round differently).
 4. The workloads: decode at batch 1 and prefill 128 / 512 of each format, aggregate decode of
    16 and 64 sequences, and batch-1 decode after a prompt of --depth tokens (attention over a
    long context; llama-bench -d).
 5. Every workload runs on both engines, alternating which goes first, --repeats times
    (--batch1-repeats for batch-1 decode), each run a fresh process with --threads threads; the
    table gives medians, the spread (min..max) and the median of the per-repeat ratios (the two
    runs of a repeat are back to back, so the ratio cancels most of a machine's slow and fast
    memory phases), then the per-byte rates and the targets llmrt is held to.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "bench_vs"
TEXT = "In the beginning God created the heaven and the earth."
LLAMA_TARGETS = ["llama-bench", "llama-batched-bench", "llama-quantize", "llama-tokenize"]


def run(cmd, **kw):
    """Runs cmd; returns stdout. Exits with its stderr on failure."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"bench_vs_llamacpp: failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-4000:]}")
    return p.stdout


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def locate_llama(path: Path):
    """(source dir, build dir) of the llama.cpp at `path`."""
    path = path.resolve()
    if (path / "convert_hf_to_gguf.py").exists():
        return path, path / "build"
    cache = path / "CMakeCache.txt"
    if cache.exists():
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(), re.M)
        if m and (Path(m.group(1)) / "convert_hf_to_gguf.py").exists():
            return Path(m.group(1)), path
    sys.exit(f"bench_vs_llamacpp: {path} is neither a llama.cpp source tree (convert_hf_to_gguf.py) "
             "nor a llama.cpp build directory (CMakeCache.txt)")


def ensure_llama_build(src: Path, build: Path):
    if all((build / "bin" / t).exists() for t in LLAMA_TARGETS):
        return
    log(f"building llama.cpp in {build} (Release, GGML_NATIVE=ON) ...")
    if not (build / "CMakeCache.txt").exists():
        run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"])
    run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", *LLAMA_TARGETS])


def ensure_venv(venv: Path, src: Path):
    py = venv / "bin" / "python"
    if py.exists():
        return py
    log(f"creating the converter's virtual environment {venv} ...")
    run([sys.executable, "-m", "venv", venv])
    run([py, "-m", "pip", "install", "-q", "torch", "transformers", "numpy", "sentencepiece", "protobuf",
         src / "gguf-py"])
    return py


def build_greedy(src: Path, build: Path, work: Path) -> Path:
    exe = work / "llamacpp_greedy"
    c = HERE / "llamacpp_greedy.c"
    if exe.exists() and exe.stat().st_mtime > c.stat().st_mtime:
        return exe
    run(["cc", "-O2", "-o", exe, c, f"-I{src / 'include'}", f"-I{src / 'ggml' / 'include'}", f"-L{build / 'bin'}",
         "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{build / 'bin'}"])
    return exe


def median_spread(v):
    return statistics.median(v), min(v), max(v)


class Bench:
    def __init__(self, a, src, lbuild, py):
        self.a, self.src, self.lbin, self.py = a, src, lbuild / "bin", py
        self.rbin = (REPO / a.build / "samples").resolve()
        self.t = str(a.threads)
        self.no_repack, self.notes = set(), []

    # --- llama.cpp -------------------------------------------------------------------------
    def llama_bench(self, gguf, p, n, depth=0):
        cmd = [str(c) for c in [self.lbin / "llama-bench", "-m", gguf, "-p", p, "-n", n, "-r", "1", "-t", self.t,
                                "-o", "json"]]
        if depth:
            cmd += ["-d", str(depth)]
        if (gguf, p, n) in self.no_repack:
            cmd += ["--repack", "0"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode < 0 and (gguf, p, n) not in self.no_repack:
            # Killed by a signal: on virtual machines that advertise AMX without granting it, the
            # repacked (AMX) quantized kernels die of SIGILL. Use the plain kernels from now on.
            self.no_repack.add((gguf, p, n))
            self.notes.append(f"llama-bench {Path(gguf).name} -p {p} -n {n} died of signal {-proc.returncode} with "
                              "its default weight repacking; measured with --repack 0")
            log(self.notes[-1])
            return self.llama_bench(gguf, p, n, depth)
        if proc.returncode != 0:
            sys.exit(f"bench_vs_llamacpp: failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}")
        return [r["samples_ts"][0] for r in json.loads(proc.stdout)]

    def llama_batched(self, gguf, npl, npp, ntg):
        ctx = max(npl) * (npp + ntg) + 64
        out = run([self.lbin / "llama-batched-bench", "-m", gguf, "-c", ctx, "-b", "2048", "-ub", "512",
                   "-npp", npp, "-ntg", ntg, "-npl", ",".join(map(str, npl)), "-t", self.t, "-tb", self.t,
                   "--output-format", "jsonl"], stdin=subprocess.DEVNULL)
        rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        return [r["speed_tg"] for r in rows]

    # --- llmrt -----------------------------------------------------------------------------
    def llmrt_decode(self, model, sessions, steps, prompt, activations="exact"):
        out = run([self.rbin / "llm-bench", "--model", model, "--sessions", ",".join(map(str, sessions)),
                   "--steps", steps, "--prompt", prompt, "--threads", self.t, "--no-baselines",
                   "--activations", activations])
        rows = re.findall(r"^\|\s*(\d+) \|\s*([0-9.]+) \|", out, re.M)
        return [float(t) for _, t in rows]

    def llmrt_prefill(self, model, lens, activations="exact"):
        out = run([self.rbin / "llm-bench", "--model", model, "--prefill-lens", ",".join(map(str, lens)),
                   "--repeats", "1", "--threads", self.t, "--activations", activations])
        return [float(t) for t in re.findall(r"^\| \d+ \| ([0-9.]+) \|", out, re.M)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama", type=Path, help="llama.cpp source tree or build directory")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch1-repeats", type=int, default=8,
                    help="repeats of the batch-1 decode workloads (short runs whose rate moves most with the "
                         "machine's memory phases)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--preset", default="k2", choices=["k2", "glm45", "glm5"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--work", type=Path, default=Path("/tmp/llmrt-vs"))
    ap.add_argument("--build", default="build", help="llmrt build directory (relative to the repository)")
    ap.add_argument("--venv", type=Path)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--depth", type=int, default=4096,
                    help="context of the long-context decode row (llama-bench -d; llm-bench --prompt); 0 skips it")
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    a = ap.parse_args()

    src, lbuild = locate_llama(a.llama)
    ensure_llama_build(src, lbuild)
    py = ensure_venv(a.venv or src.parent / "llamacpp-venv", src)
    a.work.mkdir(parents=True, exist_ok=True)
    b = Bench(a, src, lbuild, py)
    gen = b.rbin / "llm-make-bench-model"
    size = ["--layers", str(a.layers), "--hidden", str(a.hidden)]
    tag = f"{a.preset}-{a.layers}x{a.hidden}"

    # 1. llmrt checkpoints, 2. GGUFs.
    rt, rt_bytes = {}, {}
    for w in ["bf16", "fp8", "int4-g32-all"]:
        d = a.work / f"{tag}-{w}"
        rt_bytes[w] = json.loads(run([gen, "--dir", d, "--preset", a.preset, "--weights", w, *size]))[
            "weight_bytes_per_token"]
        rt[w] = d
    gg = {t: a.work / f"{tag}-{t}.gguf" for t in ["bf16", "q8_0", "q4_0"]}
    stamp = rt["bf16"] / "config.json"
    if not gg["bf16"].exists() or gg["bf16"].stat().st_mtime < stamp.stat().st_mtime:
        log("converting with llama.cpp's convert_hf_to_gguf.py ...")
        run([py, HERE / "convert_with_llamacpp.py", "convert", src, rt["bf16"], gg["bf16"], "bf16"])
    for t in ["q8_0", "q4_0"]:
        if not gg[t].exists() or gg[t].stat().st_mtime < gg["bf16"].stat().st_mtime:
            # attn_k_b / attn_v_b (MLA's kv_b_proj, split) stay BF16: quantized, this llama.cpp
            # aborts in its CPU scheduler (GGML_ASSERT(*cur_backend_id != -1)) on DeepseekV3 models.
            run([b.lbin / "llama-quantize", "--output-tensor-type", "bf16", "--token-embedding-type", "bf16",
                 "--tensor-type", "attn_k_b=bf16", "--tensor-type", "attn_v_b=bf16", gg["bf16"], gg[t], t.upper()])
    gg_bytes = {t: json.loads(run([py, HERE / "convert_with_llamacpp.py", "bytes-per-token", f]))[
        "weight_bytes_per_token"] for t, f in gg.items()}

    # 3. Checks.
    rt_ids = run([b.rbin / "llm-bench", "--tokens", rt["bf16"], "--text", TEXT]).strip()
    lc = run([b.lbin / "llama-tokenize", "-m", gg["bf16"], "-p", TEXT, "--ids", "--no-bos", "--log-disable"])
    lc_ids = ",".join(re.findall(r"\d+", lc.strip().splitlines()[-1]))
    greedy = build_greedy(src, lbuild, a.work)
    n_new = 16
    lc_gen = run([greedy, gg["bf16"], n_new, a.threads, rt_ids]).strip().split(",")
    rr = run([b.rbin / "llm-run", "--model", rt["bf16"], "--prompt-ids", rt_ids, "--max-tokens", n_new,
              "--temperature", "0", "--threads", a.threads])
    rt_gen = re.findall(r"-?\d+", rr.strip().splitlines()[-1])
    common = next((i for i, (x, y) in enumerate(zip(lc_gen, rt_gen)) if x != y), min(len(lc_gen), len(rt_gen)))

    # 4. Workloads: (name, llama.cpp fn, llmrt fn, bytes key pair or None); each fn returns a list.
    steps, s = str(a.decode_steps), str(a.decode_steps)
    work = [
        ("BF16 decode, batch 1 (tok/s)", lambda: b.llama_bench(gg["bf16"], "0", s),
         lambda: b.llmrt_decode(rt["bf16"], [1], steps, "8"), ("bf16", "bf16"), ["1"]),
        ("BF16 prefill 128 / 512 (tok/s)", lambda: b.llama_bench(gg["bf16"], "128,512", "0"),
         lambda: b.llmrt_prefill(rt["bf16"], [128, 512]), None, ["128", "512"]),
        ("BF16 aggregate decode, 16 / 64 sequences (tok/s)", lambda: b.llama_batched(gg["bf16"], [16, 64], 8, 16),
         lambda: b.llmrt_decode(rt["bf16"], [16, 64], "16", "8"), None, ["16", "64"]),
        # llama.cpp's BF16 CPU path rounds activations to bf16 too: llmrt's BF16 activation policy
        # (bf16 products, AMX tiles where the CPU has them) is the like-for-like comparison.
        ("BF16 decode, batch 1, BF16 activations (tok/s)", lambda: b.llama_bench(gg["bf16"], "0", s),
         lambda: b.llmrt_decode(rt["bf16"], [1], steps, "8", "bf16"), ("bf16", "bf16"), ["1"]),
        ("BF16 prefill 128 / 512, BF16 activations (tok/s)", lambda: b.llama_bench(gg["bf16"], "128,512", "0"),
         lambda: b.llmrt_prefill(rt["bf16"], [128, 512], "bf16"), None, ["128", "512"]),
        ("BF16 aggregate decode, 16 / 64 sequences, BF16 activations (tok/s)",
         lambda: b.llama_batched(gg["bf16"], [16, 64], 8, 16),
         lambda: b.llmrt_decode(rt["bf16"], [16, 64], "16", "8", "bf16"), None, ["16", "64"]),
        ("Q8_0 vs FP8 decode, batch 1 (tok/s)", lambda: b.llama_bench(gg["q8_0"], "0", s),
         lambda: b.llmrt_decode(rt["fp8"], [1], steps, "8"), ("q8_0", "fp8"), ["1"]),
        # llama.cpp's Q8_0 dot products round activations to 8 bits per 32 values; llmrt's BF16
        # policy rounds them to bf16 and multiplies the FP8 codes exactly (bf16 dot products).
        ("Q8_0 vs FP8 decode, batch 1, BF16 activations (tok/s)", lambda: b.llama_bench(gg["q8_0"], "0", s),
         lambda: b.llmrt_decode(rt["fp8"], [1], steps, "8", "bf16"), ("q8_0", "fp8"), ["1"]),
        ("Q4_0 vs INT4 g32 (all linears) decode, batch 1 (tok/s)", lambda: b.llama_bench(gg["q4_0"], "0", s),
         lambda: b.llmrt_decode(rt["int4-g32-all"], [1], steps, "8"), ("q4_0", "int4-g32-all"), ["1"]),
        ("Q4_0 vs INT4 g32 (all linears) prefill 128 (tok/s)", lambda: b.llama_bench(gg["q4_0"], "128", "0"),
         lambda: b.llmrt_prefill(rt["int4-g32-all"], [128]), None, ["128"]),
        # llama.cpp's Q4_0 dot products round activations to 8 bits per 32 values (Q8_0): llmrt's
        # INT8 activation policy (W4A8) is the like-for-like comparison.
        ("Q4_0 vs INT4 g32 (all linears) W4A8 decode, batch 1 (tok/s)", lambda: b.llama_bench(gg["q4_0"], "0", s),
         lambda: b.llmrt_decode(rt["int4-g32-all"], [1], steps, "8", "int8"), ("q4_0", "int4-g32-all"), ["1"]),
        ("Q4_0 vs INT4 g32 (all linears) W4A8 prefill 128 (tok/s)", lambda: b.llama_bench(gg["q4_0"], "128", "0"),
         lambda: b.llmrt_prefill(rt["int4-g32-all"], [128], "int8"), None, ["128"]),
    ]
    if a.depth:
        # Decode after a long prompt: attention over the cache adds to the weights' reads (the
        # prompt is prefilled first and not timed by either engine).
        d = str(a.depth)
        work.append((f"BF16 decode at {a.depth} tokens of context, batch 1, BF16 activations (tok/s)",
                     lambda: b.llama_bench(gg["bf16"], "0", "16", a.depth),
                     lambda: b.llmrt_decode(rt["bf16"], [1], "16", d, "bf16"), None, ["1"]))
    res = {i: ([], []) for i in range(len(work))}
    # A workload with a bytes pair is a batch-1 decode.
    reps = [a.batch1_repeats if w[3] else a.repeats for w in work]
    for r in range(max(reps)):
        for i, (name, lfn, rfn, _, _) in enumerate(work):
            if r >= reps[i]:
                continue
            log(f"repeat {r + 1}/{reps[i]}: {name}")
            order = [(0, lfn), (1, rfn)] if (r + i) % 2 == 0 else [(1, rfn), (0, lfn)]
            for k, fn in order:
                res[i][k].append(fn())

    # Report.
    lines = []
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    lines.append(f"Machine: {cpu}, {os.cpu_count()} cores visible, {platform.system()} {platform.release()}; "
                 f"{datetime.date.today().isoformat()}; {a.threads} threads each, {a.repeats} interleaved repeats "
                 f"({a.batch1_repeats} of batch-1 decode), medians (min..max).")
    lines.append(f"Model: llm-make-bench-model --preset {a.preset} --layers {a.layers} --hidden {a.hidden} "
                 "(random weights); llama.cpp GGUFs converted from the same BF16 checkpoint.")
    lines.append("")
    lines.append("The last column pairs the two engines' runs of each repeat (run back to back, so a slow or "
                 "fast phase of the machine's memory moves both) and gives the median of those ratios.")
    lines.append("")
    lines.append("| workload | llama.cpp | llmrt | llmrt / llama.cpp (medians) | per-repeat ratio |")
    lines.append("|---|---:|---:|---:|---:|")
    per_byte, paired = [], {}
    for i, (name, _, _, bytes_keys, labels) in enumerate(work):
        lc_runs, rt_runs = res[i]
        for j, lab in enumerate(labels):
            lv = [x[j] for x in lc_runs]
            rv = [x[j] for x in rt_runs]
            (lm, llo, lhi), (rm, rlo, rhi) = median_spread(lv), median_spread(rv)
            pm, plo, phi = median_spread([y / x for x, y in zip(lv, rv)])
            paired[(i, lab)] = pm
            label = name if len(labels) == 1 else f"{name.split(' (')[0]}: {lab}"
            lines.append(f"| {label} | {lm:.2f} ({llo:.2f}..{lhi:.2f}) | {rm:.2f} ({rlo:.2f}..{rhi:.2f}) | "
                         f"{rm / lm:.2f}x | {pm:.2f}x ({plo:.2f}..{phi:.2f}) |")
            if bytes_keys:
                lb, rb = gg_bytes[bytes_keys[0]], rt_bytes[bytes_keys[1]]
                per_byte.append((label, bytes_keys, lb, rb, lm, rm, pm))
    lines.append("")
    lines.append("Per byte read (batch-1 decode: weight bytes one token reads, and tok/s x bytes/token = "
                 "the weight-read bandwidth achieved):")
    lines.append("")
    lines.append("| workload | llama.cpp format | GB/token | GB/s | llmrt format | GB/token | GB/s | "
                 "llmrt / llama.cpp GB/s (medians) | per-repeat |")
    lines.append("|---|---|---:|---:|---|---:|---:|---:|---:|")
    def byte_label(label):
        # The workload without its batch size: "Q8_0 vs FP8 decode, BF16 activations".
        parts = label.replace(" (tok/s)", "").split(", ")
        return ", ".join([parts[0]] + [p for p in parts[1:] if "activations" in p])

    byte_ratio = {}
    for label, (lk, rk), lb, rb, lm, rm, pm in per_byte:
        byte_ratio[byte_label(label)] = pm * rb / lb
        lines.append(f"| {byte_label(label)} | {lk.upper()} | {lb / 1e9:.3f} | {lm * lb / 1e9:.2f} | {rk} | "
                     f"{rb / 1e9:.3f} | {rm * rb / 1e9:.2f} | {(rm * rb) / (lm * lb):.2f}x | "
                     f"{pm * rb / lb:.2f}x |")
    lines.append("")

    # The targets, each read from the per-repeat ratios of the like-for-like numerics (llama.cpp
    # rounds BF16-weight activations to bf16 and quantized-weight activations to 8 bits).
    def row(prefix, lab):
        i = next(k for k, w in enumerate(work) if w[0] == prefix)
        return paired[(i, lab)]
    targets = [
        ("BF16 decode, batch 1 (BF16 activations)", row("BF16 decode, batch 1, BF16 activations (tok/s)", "1"), 1.1),
        ("BF16 prefill 512 (BF16 activations)", row("BF16 prefill 128 / 512, BF16 activations (tok/s)", "512"), 1.0),
        ("BF16 aggregate decode, 64 sequences (BF16 activations)",
         row("BF16 aggregate decode, 16 / 64 sequences, BF16 activations (tok/s)", "64"), 1.5),
        ("INT4 decode batch 1 per byte (W4A8 vs Q4_0)",
         byte_ratio["Q4_0 vs INT4 g32 (all linears) W4A8 decode"], 1.0),
        ("FP8 decode batch 1 per byte (BF16 activations vs Q8_0)",
         byte_ratio["Q8_0 vs FP8 decode, BF16 activations"], 1.0),
    ]
    lines.append("| target | llmrt / llama.cpp (per-repeat median) | goal | met |")
    lines.append("|---|---:|---:|---|")
    for name, v, goal in targets:
        lines.append(f"| {name} | {v:.2f}x | >= {goal:.1f}x | {'yes' if v >= goal else 'NO'} |")
    lines.append("")
    same_ids = rt_ids == lc_ids
    lines.append(f"Tokenizer check ({TEXT!r}): llmrt {'==' if same_ids else '!='} llama.cpp "
                 f"({rt_ids}{'' if same_ids else ' vs ' + lc_ids}).")
    lines.append(f"Greedy check (BF16, those prompt ids, {n_new} new tokens): the first {common} of {n_new} agree; "
                 f"llama.cpp {','.join(lc_gen)}; llmrt {','.join(rt_gen)}.")
    for note in b.notes:
        lines.append(f"Note: {note}.")
    report = "\n".join(lines)
    print(report)
    if a.out:
        a.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
