"""Runs llama.cpp's own convert_hf_to_gguf.py on an llmrt-generated checkpoint, or reports the
weight bytes one decode step of a GGUF reads. Used by tools/bench_vs_llamacpp.py inside the
converter's virtual environment (torch, transformers, numpy, sentencepiece, llama.cpp's gguf-py).

  python convert_with_llamacpp.py convert LLAMA_SRC MODEL_DIR OUT.gguf OUTTYPE
  python convert_with_llamacpp.py bytes-per-token FILE.gguf

Why a wrapper: the converter names a byte-level BPE tokenizer's pre-tokenizer by hashing the ids
it gives a fixed text and looking the hash up in a table of released tokenizers. The generated
checkpoints carry a small trained tokenizer (GLM-4.5's pre-tokenizer regex and special tokens,
3,876 tokens), whose hash is in no table, so the converter refuses it. When, and only when, the
hash is unknown and the tokenizer.json's pre-tokenizer is GLM-4.5's split regex, this names it
"glm4" (the name the converter gives GLM-4.5's own tokenizer). Everything else, tensors
included, is the converter's own code.
"""
import json
import sys
from pathlib import Path

# GLM-4.5's pre-tokenizer: one Split with this regex, then ByteLevel without its own regex.
GLM45_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
               "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def split_regex(model_dir: Path):
    """The Split regex of tokenizer.json's pre-tokenizer, or None."""
    try:
        tj = json.loads((model_dir / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return None
    pre = tj.get("pre_tokenizer") or {}
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "Split":
            return (p.get("pattern") or {}).get("Regex")
    return None


def is_glm45_split(regex) -> bool:
    if regex is None:
        return False
    # GLM-4.5's tokenizer.json spells the contractions either case-insensitively or as classes.
    classes = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])")
    return regex == GLM45_SPLIT or regex == GLM45_SPLIT.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)", classes)


def convert(llama_src: Path, model_dir: Path, out: Path, outtype: str) -> None:
    sys.path.insert(0, str(llama_src / "gguf-py"))
    sys.path.insert(0, str(llama_src))
    import convert_hf_to_gguf  # noqa: E402  (llama.cpp's converter)
    from conversion.base import TextModel as text_model  # noqa: E402
    original = text_model.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            if not is_glm45_split(split_regex(model_dir)):
                raise
            print("convert_with_llamacpp: unknown tokenizer hash; the tokenizer.json pre-tokenizer is GLM-4.5's, "
                  "naming it glm4", file=sys.stderr)
            return "glm4"

    text_model.get_vocab_base_pre = get_vocab_base_pre
    sys.argv = ["convert_hf_to_gguf.py", str(model_dir), "--outtype", outtype, "--outfile", str(out)]
    convert_hf_to_gguf.main()


def bytes_per_token(path: Path) -> None:
    """Weight bytes one decode step at batch 1 reads: every tensor but the embedding table (one
    row) and the routed experts, which count at expert_used_count / expert_count."""
    from gguf import GGUFReader
    r = GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

    def field(name, default=0):
        f = r.fields.get(f"{arch}.{name}")
        return int(f.parts[-1][0]) if f is not None else default

    experts, used = field("expert_count"), field("expert_used_count")
    total = 0.0
    for t in r.tensors:
        b = float(t.n_bytes)
        if t.name == "token_embd.weight":
            total += b / int(t.shape[-1])
        elif "_exps" in t.name and experts > 0:
            total += b * used / experts
        else:
            total += b
    print(json.dumps({"weight_bytes_per_token": total}))


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "convert":
        convert(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "bytes-per-token":
        bytes_per_token(Path(sys.argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
