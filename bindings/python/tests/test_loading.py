"""How the package finds libllmrt: LLMRT_LIBRARY, LLMRT_LIB_DIR, pkg-config, the system loader.

Each case runs in a fresh interpreter, since a process loads the library once."""

import os
import pathlib
import subprocess
import sys

import pytest

import llmrt

PROBE = "import llmrt; print(llmrt.library_path()); print(llmrt.version())"


def run(env_changes, code=PROBE):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LLMRT_LIBRARY", "LLMRT_LIB_DIR", "PKG_CONFIG_PATH", "LD_LIBRARY_PATH")}
    env["PKG_CONFIG_PATH"] = ""
    env.update(env_changes)
    # The package as this test process imports it (installed, or a source tree on sys.path).
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(llmrt.__file__).parents[1])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def libfile():
    return pathlib.Path(llmrt.library_path()).resolve()


def test_llmrt_library_names_the_file(libfile):
    r = run({"LLMRT_LIBRARY": str(libfile)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == str(libfile)


def test_llmrt_library_that_does_not_exist_is_not_replaced_by_another_copy(libfile):
    r = run({"LLMRT_LIBRARY": "/nonexistent/libllmrt.so.1", "LLMRT_LIB_DIR": str(libfile.parent)})
    assert r.returncode != 0
    assert "LibraryNotFoundError" in r.stderr and "/nonexistent/libllmrt.so.1" in r.stderr


def test_llmrt_lib_dir(libfile):
    r = run({"LLMRT_LIB_DIR": str(libfile.parent)})
    assert r.returncode == 0, r.stderr
    assert pathlib.Path(r.stdout.splitlines()[0]).resolve() == libfile


def test_pkg_config(libfile):
    pc = libfile.parent / "pkgconfig" / "llmrt.pc"
    if not pc.is_file():
        pytest.skip(f"the library under test was not installed with llmrt.pc ({pc})")
    r = run({"PKG_CONFIG_PATH": str(pc.parent)})
    assert r.returncode == 0, r.stderr
    assert pathlib.Path(r.stdout.splitlines()[0]).resolve() == libfile


def test_import_never_fails_and_first_use_says_what_to_set():
    r = run({"LLMRT_LIB_DIR": "/nonexistent/lib"}, code="import ctypes.util, llmrt\n"
            "if ctypes.util.find_library('llmrt'): raise SystemExit(3)\n"
            "try:\n    llmrt.version()\nexcept llmrt.LibraryNotFoundError as e:\n    print(e)\n")
    if r.returncode == 3:
        pytest.skip("a libllmrt is installed where the system loader finds it")
    assert r.returncode == 0, r.stderr
    assert "LLMRT_LIBRARY" in r.stdout and "PKG_CONFIG_PATH" in r.stdout and "/nonexistent/lib" in r.stdout
