"""The constants and structs the binding declares by hand match the header.

bindings/abi_manifest.txt is produced from include/llmrt/llmrt.h by tests/abi/abi_manifest.c
(lines `const NAME VALUE`, `struct NAME size N align A`, `field STRUCT.FIELD offset O size S`)."""

import ctypes
import pathlib
import re

import pytest

from llmrt import _abi
from conftest import MANIFEST


def parse_manifest(text):
    consts, structs, fields = {}, {}, {}
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            if parts[0] == "const" and len(parts) == 3:
                consts[parts[1]] = int(parts[2])
            elif parts[0] == "struct" and len(parts) == 6 and parts[2] == "size" and parts[4] == "align":
                structs[parts[1]] = (int(parts[3]), int(parts[5]))
            elif parts[0] == "field" and len(parts) == 6 and parts[2] == "offset" and parts[4] == "size":
                struct, field = parts[1].split(".", 1)
                fields.setdefault(struct, {})[field] = (int(parts[3]), int(parts[5]))
            else:
                raise ValueError(line)
        except ValueError:
            pytest.fail(f"{MANIFEST}:{n}: cannot parse {line!r}")
    return consts, structs, fields


@pytest.fixture(scope="module")
def manifest():
    assert MANIFEST.is_file(), f"{MANIFEST} is missing"
    return parse_manifest(MANIFEST.read_text())


def layout_problems(cls, structs, fields):
    """Differences between a ctypes Structure and the manifest's entry of the same name."""
    name = cls.__name__
    if name not in structs:
        return [f"struct {name} is not in the header"]
    size, align = structs[name]
    out = []
    if ctypes.sizeof(cls) != size:
        out.append(f"sizeof({name}) is {ctypes.sizeof(cls)}, the header's {size}")
    if ctypes.alignment(cls) != align:
        out.append(f"alignof({name}) is {ctypes.alignment(cls)}, the header's {align}")
    want = fields.get(name, {})
    have = {f[0]: (getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_}
    for f, (off, sz) in want.items():
        if f not in have:
            out.append(f"{name}.{f} is not declared")
        elif have[f] != (off, sz):
            out.append(f"{name}.{f} has offset {have[f][0]} size {have[f][1]}, the header's {off} and {sz}")
    out += [f"{name}.{f} is not in the header" for f in have if f not in want]
    return out


def structs_used():
    """Every Structure the declared functions reach (arguments, results, pointers, fields)."""
    seen = set()

    def visit(t):
        while t is not None and hasattr(t, "_type_") and not isinstance(getattr(t, "_type_"), str):
            t = t._type_  # POINTER(...) and arrays
        if isinstance(t, type) and issubclass(t, ctypes.Structure) and t not in seen:
            seen.add(t)
            for _, ft in t._fields_:
                visit(ft)

    for restype, argtypes in _abi.PROTOTYPES.values():
        for t in [restype] + list(argtypes):
            visit(t)
    # And those passed through void* (llm_decode_step_v2's results): every struct of _abi that
    # the package's code names.
    pkg = pathlib.Path(_abi.__file__).parent
    for src in pkg.glob("*.py"):
        for name in set(re.findall(r"\b(llm_[a-z0-9_]+)\b", src.read_text())):
            visit(getattr(_abi, name, None))
    return seen


def test_constants_match(manifest):
    consts, _, _ = manifest
    assert len(_abi.CONSTANTS) > 60
    bad = {k: (v, consts.get(k)) for k, v in _abi.CONSTANTS.items() if consts.get(k) != v}
    assert not bad, f"binding value vs header value: {bad}"


def test_structs_match(manifest):
    _, structs, fields = manifest
    problems = [p for cls in _abi.STRUCTS.values() for p in layout_problems(cls, structs, fields)]
    assert not problems, "\n".join(problems)


def test_every_struct_used_is_declared_and_checked(manifest):
    _, structs, _ = manifest
    used = structs_used()
    assert _abi.llm_kv_tracker in used and _abi.llm_step_result in used
    missing = [cls.__name__ for cls in used if _abi.STRUCTS.get(cls.__name__) is not cls]
    assert not missing, f"structs the binding uses without declaring them in STRUCTS: {missing}"
    unknown = [cls.__name__ for cls in used if cls.__name__ not in structs]
    assert not unknown, f"structs the binding uses that the header does not have: {unknown}"
    # The binding also declares every struct of the header, so none goes unchecked.
    assert sorted(structs) == sorted(_abi.STRUCTS)


def test_the_check_catches_a_wrong_layout(manifest):
    _, structs, fields = manifest

    class llm_session_info(ctypes.Structure):  # noqa: N801 (the header's name)
        _fields_ = [("struct_size", ctypes.c_uint32), ("state", ctypes.c_int32), ("id", ctypes.c_uint32),
                    ("num_tokens", ctypes.c_uint32), ("num_pending", ctypes.c_uint32),
                    ("num_generated", ctypes.c_uint32), ("num_pages", ctypes.c_uint32), ("extra", ctypes.c_uint8)]

    problems = layout_problems(llm_session_info, structs, fields)
    assert any("alignof(llm_session_info) is 4, the header's 8" in p for p in problems), problems
    assert any("llm_session_info.id" in p for p in problems)
    assert any("extra is not in the header" in p for p in problems)

    class llm_not_in_header(ctypes.Structure):  # noqa: N801
        _fields_ = [("x", ctypes.c_int)]

    assert layout_problems(llm_not_in_header, structs, fields) == ["struct llm_not_in_header is not in the header"]
    assert parse_manifest("const A 1\nstruct s size 8 align 4\nfield s.x offset 4 size 4\n") == (
        {"A": 1}, {"s": (8, 4)}, {"s": {"x": (4, 4)}})


def test_library_matches_the_binding():
    lib = _abi.lib()
    number = lib.llm_version_number()
    assert number // 1000000 == _abi.LLMRT_VERSION_MAJOR
    assert lib.llm_version().decode() == "{}.{}.{}".format(number // 1000000, number // 1000 % 1000, number % 1000)
