#!/usr/bin/env python3
"""Reference table for llmrt's FP8 e4m3 (OCP e4m3fn) conversion, from ml_dtypes.

Writes tests/data/fp8_e4m3_table.bin:
  - 256 little-endian float32: the value of every FP8 code (NaN codes as NaN);
  - 131072 bytes: the FP8 code of float32 inputs (bf16_pattern << 16) | low, for every bf16
    pattern and low in (0x0000, 0x0001), in that order (pattern-major).
Encoding semantics: round to nearest even, saturate to +-448 (values are clipped before the cast,
since ml_dtypes itself turns overflow into NaN), NaN stays NaN.

usage: python3 tools/make_fp8_table.py        Pinned: ml_dtypes 0.5.x, numpy 2.x
"""
import os

import ml_dtypes
import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "fp8_e4m3_table.bin")


def main():
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    decode = codes.astype(np.float32)
    pats = np.arange(65536, dtype=np.uint32)
    inputs = np.stack([(pats << 16) | 0, (pats << 16) | 1], axis=1).reshape(-1).view(np.float32)
    clipped = np.where(np.isnan(inputs), inputs, np.clip(inputs, -448.0, 448.0))
    enc = clipped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    with open(OUT, "wb") as f:
        f.write(decode.astype("<f4").tobytes())
        f.write(enc.tobytes())
    print("wrote", OUT, os.path.getsize(OUT), "bytes; max", float(decode[0x7e]))


if __name__ == "__main__":
    main()
