"""tools/bench_serving.py runs against llm-server and accounts for every token."""

import json
import subprocess
import sys

from conftest import ROOT


def test_bench_serving_smoke(server, tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_serving.py"), "--url", server.url,
                        "--num-requests", "8", "--concurrency", "1,4", "--max-tokens", "16", "--timeout", "60",
                        "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "concurrency 4" in r.stdout and "TTFT p50" in r.stdout
    rows = json.loads(out.read_text())
    assert [row["label"] for row in rows] == ["concurrency 1", "concurrency 4"]
    for row in rows:
        assert row["completed"] == 8 and row["failed"] == 0
        assert row["output_tokens"] == 8 * 16  # ignore_eos: exactly max_tokens each
        assert 0 < row["ttft_p50"] <= row["ttft_p99"]
        assert 0 < row["tpot_p50"] <= row["tpot_p99"]
