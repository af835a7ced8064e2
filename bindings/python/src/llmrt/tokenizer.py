"""Tokenizer (immutable, thread-safe) and Detokenizer (incremental, for streaming text)."""

import array
import ctypes
import dataclasses
import threading
import weakref

from . import _abi
from . import errors
from ._handle import Handle


def _int32_array(tokens, what="tokens"):
    """tokens as a C int32 array (ctypes would silently truncate ids beyond int32)."""
    if isinstance(tokens, (str, bytes)):
        raise errors.binding_error(errors.Status.INVALID_ARGUMENT, f"{what} must be a sequence of int token ids")
    try:
        arr = array.array("i", tokens)
    except (OverflowError, TypeError) as e:
        raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                   f"{what}: every token id must be an int in the int32 range ({e})") from None
    assert arr.itemsize == 4, "C int is 32 bits on LP64"
    n = len(arr)
    buf = (ctypes.c_int32 * n).from_buffer(arr) if n else None
    return arr, buf, n


def _text_bytes(text, what="text"):
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    if isinstance(text, (bytes, bytearray)):
        return bytes(text)
    raise errors.binding_error(errors.Status.INVALID_ARGUMENT, f"{what} must be str or bytes, not {type(text).__name__}")


def _decode(raw):
    # The library emits UTF-8; an id-level decode of partial byte tokens may not be, so replace.
    return raw.decode("utf-8", "replace")


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    family: int       # LLM_TOKENIZER_KIMI (1) or LLM_TOKENIZER_GLM (2)
    vocab_size: int
    bos_id: int       # -1 if none
    eos_id: int       # -1 if none


class Tokenizer:
    """A checkpoint's tokenizer (Kimi's tiktoken.model or GLM's tokenizer.json).

    Immutable and safe to use from many threads at once. Release it with close() or a `with`
    block; detokenizers made from it are closed with it."""

    def __init__(self, model_dir):
        lib = _abi.lib()
        path = errors.c_path(model_dir)
        out = ctypes.c_void_p()
        err = errors.new_error_struct()
        st = lib.llm_tokenizer_create_v2(path, ctypes.byref(out), ctypes.byref(err))
        if st != _abi.LLM_OK:
            raise errors.error_for(st, errors.message_of(err))
        self._h = Handle(out.value, "tokenizer", lib.llm_tokenizer_destroy)
        self._detokenizers = weakref.WeakSet()
        info = _abi.llm_tokenizer_info()
        info.struct_size = ctypes.sizeof(info)
        self._call(lib.llm_tokenizer_get_info, ctypes.byref(info))
        self.info = TokenizerInfo(info.family, info.vocab_size, info.bos_id, info.eos_id)

    # -- plumbing
    def _call(self, fn, *args, ok=(_abi.LLM_OK,)):
        ptr = self._h.acquire()
        try:
            st = fn(ptr, *args)
            if st not in ok:
                raise errors.from_handle(st, _abi.lib().llm_tokenizer_last_error, ptr)
            return st
        finally:
            self._h.release()

    def _text_call(self, fn, *args):
        """Runs fn(ptr, *args, buf, capacity, &len) with a buffer grown to what it reports."""
        n = ctypes.c_size_t(0)
        cap = 256
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = self._call(fn, *args, buf, cap, ctypes.byref(n),
                            ok=(_abi.LLM_OK, _abi.LLM_ERR_BUFFER_TOO_SMALL))
            if st == _abi.LLM_OK:
                return buf.raw[:n.value]
            cap = n.value + 1

    # -- API
    @property
    def eos_id(self):
        return self.info.eos_id

    @property
    def bos_id(self):
        return self.info.bos_id

    def encode(self, text, parse_special=False):
        """Token ids of `text` (str or UTF-8 bytes). parse_special: special-token text such as
        "<|im_end|>" becomes its id; otherwise it is encoded as plain text."""
        data = _text_bytes(text)
        n = ctypes.c_size_t(0)
        cap = len(data) + 8
        while True:
            out = (ctypes.c_int32 * cap)()
            st = self._call(_abi.lib().llm_tokenize, data, len(data), int(bool(parse_special)), out, cap,
                            ctypes.byref(n), ok=(_abi.LLM_OK, _abi.LLM_ERR_BUFFER_TOO_SMALL))
            if st == _abi.LLM_OK:
                return list(out[:n.value])
            cap = n.value

    def decode(self, tokens, skip_special=False):
        """The text of `tokens`; skip_special leaves special tokens out."""
        _, buf, n = _int32_array(tokens)
        return _decode(self._text_call(_abi.lib().llm_detokenize, buf, n, int(bool(skip_special))))

    def special_id(self, text):
        """The id of the special token `text` ("<|im_end|>"), or None when there is none."""
        out = ctypes.c_int32(-1)
        b = _text_bytes(text)
        if b"\0" in b:  # (a C string: it would end there)
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT, "special token text contains a NUL character")
        st = self._call(_abi.lib().llm_tokenizer_special_id, b, ctypes.byref(out),
                        ok=(_abi.LLM_OK, _abi.LLM_ERR_NOT_FOUND))
        return out.value if st == _abi.LLM_OK else None

    def apply_chat_template(self, messages, add_generation_prompt=True, enable_thinking=False):
        """Renders messages ([{"role": ..., "content": ...}] or (role, content) pairs) in the
        family's chat format; encode the result with parse_special=True."""
        pairs = []
        for i, m in enumerate(messages):
            if isinstance(m, dict):
                role, content = m.get("role"), m.get("content")
            else:
                try:
                    role, content = m
                except (TypeError, ValueError):
                    raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                               f"messages[{i}] must be a dict with role and content, or a pair") from None
            if not isinstance(role, str) or not isinstance(content, str):
                raise errors.binding_error(errors.Status.INVALID_ARGUMENT,
                                           f"messages[{i}]: role and content must be str")
            pairs.append((_text_bytes(role), _text_bytes(content)))
        for i, (r, c) in enumerate(pairs):
            if b"\0" in r or b"\0" in c:
                raise errors.binding_error(errors.Status.INVALID_ARGUMENT, f"messages[{i}] contains a NUL character")
        arr = (_abi.llm_chat_message * max(1, len(pairs)))()
        for i, (r, c) in enumerate(pairs):
            arr[i].role = r
            arr[i].content = c
        return _decode(self._text_call(_abi.lib().llm_chat_apply_template, arr, len(pairs),
                                       int(bool(add_generation_prompt)), int(bool(enable_thinking))))

    def detokenizer(self, skip_special=True):
        """An incremental detokenizer for streaming (text only in whole UTF-8 characters)."""
        return Detokenizer(self, skip_special)

    def close(self):
        """Releases the tokenizer and the detokenizers made from it (idempotent)."""
        self._h.close(before_destroy=lambda: [d._close(parent_closing=True) for d in list(self._detokenizers)])

    @property
    def closed(self):
        return self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False



class Detokenizer:
    """Turns a stream of token ids into text, holding back incomplete UTF-8 characters.
    One thread at a time uses it (a lock enforces that); it keeps its tokenizer alive."""

    def __init__(self, tokenizer, skip_special=True):
        lib = _abi.lib()
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._buf = ctypes.create_string_buffer(256)
        out = ctypes.c_void_p()
        parent = tokenizer._h
        ptr = parent.acquire()
        try:
            st = lib.llm_detokenizer_create(ptr, int(bool(skip_special)), ctypes.byref(out))
            if st != _abi.LLM_OK:
                raise errors.from_handle(st, lib.llm_tokenizer_last_error, ptr)
            # The library requires the tokenizer to outlive the detokenizer: the handle holds it.
            self._h = Handle(out.value, "detokenizer", lib.llm_detokenizer_destroy, parent=parent)
            # Registered while the tokenizer cannot be closed, so its close() sees this one.
            tokenizer._detokenizers.add(self)
        finally:
            parent.release()

    def _run(self, fn, *args):
        lib = _abi.lib()
        n = ctypes.c_size_t(0)
        with self._lock:
            ptr = self._h.acquire()
            try:
                st = fn(ptr, *args, self._buf, len(self._buf), ctypes.byref(n))
                if st == _abi.LLM_ERR_BUFFER_TOO_SMALL:
                    # The token was taken and its text stays ready: collect it with a bigger buffer.
                    self._buf = ctypes.create_string_buffer(n.value + 1)
                    if fn is lib.llm_detokenizer_push:
                        st = fn(ptr, _abi.LLM_TOKEN_NONE, self._buf, len(self._buf), ctypes.byref(n))
                    else:
                        st = fn(ptr, self._buf, len(self._buf), ctypes.byref(n))
                if st != _abi.LLM_OK:
                    raise errors.from_handle(st, lib.llm_detokenizer_last_error, ptr)
                return _decode(self._buf.raw[:n.value])
            finally:
                self._h.release()

    def push(self, token):
        """Adds a token (or LLM_TOKEN_NONE) and returns the text that became ready."""
        if not isinstance(token, int) or not -(2 ** 31) <= token < 2 ** 31:
            raise errors.binding_error(errors.Status.INVALID_ARGUMENT, f"token {token!r} is not an int32 id")
        return self._run(_abi.lib().llm_detokenizer_push, token)

    def flush(self):
        """Returns what is held back (an incomplete character becomes U+FFFD) and resets."""
        return self._run(_abi.lib().llm_detokenizer_flush)

    def close(self):
        self._close()

    def _close(self, parent_closing=False):
        with self._lock:
            self._h.close(parent_closing=parent_closing)

    @property
    def closed(self):
        return self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

