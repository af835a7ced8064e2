#!/usr/bin/env python3
"""Extracts the King James Bible from Debian's bible-kjv package and fixes the train/held-out split.

`bible -f "Genesis 1:1-Revelation 22:21"` prints all 31,102 verses, one per line, each starting
with its reference ("Ge1:1 In the beginning ..."). The reference is stripped; each verse is one
line of text. Held out: the last five books (1 John, 2 John, 3 John, Jude, Revelation), whole.

usage: python3 tools/kjv_corpus.py OUT_DIR      (writes OUT_DIR/train.txt and OUT_DIR/heldout.txt)
Needs: apt-get install bible-kjv
"""
import os
import re
import subprocess
import sys

HELDOUT_BOOKS = ("1Jn", "2Jn", "3Jn", "Jude", "Rev")
REF = re.compile(r"^([0-9]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/llmrt-kjv"
    os.makedirs(out, exist_ok=True)
    raw = subprocess.run(["bible", "-f", "Genesis 1:1-Revelation 22:21"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    assert len(raw) == 31102, len(raw)
    train, held = [], []
    for line in raw:
        m = REF.match(line)
        assert m, line
        book, text = m.group(1), m.group(4).strip()
        (held if book in HELDOUT_BOOKS else train).append(text)
    with open(os.path.join(out, "train.txt"), "w") as f:
        f.write("\n".join(train) + "\n")
    with open(os.path.join(out, "heldout.txt"), "w") as f:
        f.write("\n".join(held) + "\n")
    print(f"train: {len(train)} verses; held out: {len(held)} verses ({', '.join(HELDOUT_BOOKS)})")


if __name__ == "__main__":
    main()
