"""Fixtures for the llm-server suite: start servers on loopback, talk to them with the official
openai client (no retries, so that every status is seen as sent), read /metrics."""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LLMRT_BUILD_DIR", ROOT / "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
SERVER = BUILD / "samples" / "llm-server"
LLM_RUN = BUILD / "samples" / "llm-run"
KIMI = ROOT / "models" / "kimi-k2-kjv-tiny"
GLM = ROOT / "models" / "glm4-moe-kjv-tiny"


class Server:
    """One llm-server process on 127.0.0.1 with a free port."""

    def __init__(self, model=KIMI, *args):
        self.model_dir = Path(model)
        self.name = self.model_dir.name
        self.log = tempfile.NamedTemporaryFile(prefix="llm-server-", suffix=".log", delete=False)
        cmd = [str(SERVER), "--model", str(model), "--port", "0", "--host", "127.0.0.1", *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()  # printed once listening
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"llm-server did not start: {line!r}\n{self.log_text()}")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        self.clients = []

    def log_text(self):
        return Path(self.log.name).read_text(errors="replace")

    def client(self, **kw):
        c = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60, **kw)
        self.clients.append(c)
        return c

    def raw(self, method, path, body=None, headers=None, timeout=30):
        """(status, headers, body bytes) of one request, without the openai client."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metrics(self):
        """/metrics as {name{labels}: value}."""
        status, _, body = self.raw("GET", "/metrics")
        assert status == 200
        out = {}
        for line in body.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
        return out

    def wait_metric(self, key, predicate, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            value = self.metrics().get(key, 0.0)
            if predicate(value) or time.monotonic() > deadline:
                return value
            time.sleep(0.01)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        # Idle keep-alive connections hold a server thread until their timeout (5 s): close them
        # so that the shutdown does not wait for it.
        for c in self.clients:
            c.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def close(self):
        """Stops the server; asserts a clean exit (the log is kept and shown if not)."""
        rc = self.stop()
        assert rc == 0, f"llm-server exited with {rc}; its log ({self.log.name}):\n{self.log_text()}"
        os.unlink(self.log.name)


@pytest.fixture(scope="session", autouse=True)
def _binaries():
    for b in (SERVER, LLM_RUN):
        if not b.exists():
            pytest.exit(f"{b} is missing: build the llm-server and llm-run targets first", returncode=1)


@pytest.fixture(scope="module")
def server():
    """The shipped Kimi-architecture model with default options; shut down cleanly at the end."""
    s = Server(KIMI)
    yield s
    s.close()


@pytest.fixture
def start_server():
    """Starts servers with extra options; each must exit 0 on SIGTERM."""
    started = []

    def start(*args, model=KIMI):
        s = Server(model, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def llm_run(model, *args):
    """llm-run's stdout (the reference generation)."""
    r = subprocess.run([str(LLM_RUN), "--model", str(model), *map(str, args)], capture_output=True, text=True,
                       timeout=120, check=True)
    return r.stdout


def error_of(body):
    """The OpenAI-style error object of a response body, checked for its shape."""
    e = json.loads(body)["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"]
    return e


def ids_prompt(n, salt=0):
    """A deterministic prompt of exactly n token ids (ordinary BPE ranks of the shipped tokenizer)."""
    return [100 + (i * 37 + salt * 101) % 3000 for i in range(n)]
