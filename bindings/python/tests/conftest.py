"""Shared fixtures: the repository's models and the ABI manifest.

The tests run against the installed package and the library it finds (LLMRT_LIBRARY,
LLMRT_LIB_DIR or pkg-config). LLMRT_REPO_ROOT names the repository when the tests run from
elsewhere; by default it is three levels above this file."""

import os
import pathlib

import pytest

import llmrt

REPO = pathlib.Path(os.environ.get("LLMRT_REPO_ROOT") or pathlib.Path(__file__).resolve().parents[3])
KJV = REPO / "models" / "kimi-k2-kjv-tiny"
TINY = REPO / "tests" / "data" / "tiny_kimi_k2_qlora_yarn"
MANIFEST = REPO / "bindings" / "abi_manifest.txt"

# The C ABI test's golden (tests/data/tiny_kimi_k2_qlora_yarn.golden.json, from transformers).
GOLDEN_PROMPT = [0, 17, 42, 99, 3, 250, 7]
GOLDEN_IDS = [178, 108, 252, 14, 31, 214, 39, 201, 165]
# What `llm-run --model models/kimi-k2-kjv-tiny --prompt "In the beginning" --max-tokens 24` prints.
KJV_PROMPT = "In the beginning"
KJV_TEXT = " of the creation of the flesh is the end of the flesh.\nFor the end of this world are ye, which"


def pytest_report_header(config):
    return [f"llmrt package: {llmrt.__file__}", f"libllmrt: {llmrt.library_path()} ({llmrt.version()})",
            f"repository: {REPO}"]


@pytest.fixture(scope="module")
def kjv():
    with llmrt.Runtime(KJV) as rt:
        yield rt


@pytest.fixture(scope="module")
def tiny():
    with llmrt.Runtime(TINY, kv_dtype="f32") as rt:
        yield rt
