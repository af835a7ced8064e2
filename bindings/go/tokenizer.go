package llmrt

// #include <stdlib.h>
// #include "llmrt/llmrt.h"
import "C"

import (
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// Tokenizer is a model directory's tokenizer (llm_tokenizer): Kimi's tiktoken.model or GLM's
// tokenizer.json. It is immutable and safe for concurrent use.
type Tokenizer struct {
	ptr *C.llm_tokenizer
	g   guard

	mu    sync.Mutex
	detok map[*Detokenizer]struct{} // live detokenizers, closed before the tokenizer
}

// TokenizerInfo describes a tokenizer (llm_tokenizer_info).
type TokenizerInfo struct {
	Family    TokenizerFamily
	VocabSize uint32 // ids including special tokens (config.json's vocab_size may be larger)
	BOS       int32  // -1 if none
	EOS       int32  // -1 if none
}

// ChatMessage is one message of a conversation for ApplyChatTemplate (llm_chat_message).
type ChatMessage struct {
	Role    string // "system", "user", "assistant" (Kimi: "tool"; GLM: "observation")
	Content string
}

// NewTokenizer loads the tokenizer of a model directory.
func NewTokenizer(modelDir string) (*Tokenizer, error) {
	cdir, err := cstring("NewTokenizer", "the model directory", modelDir)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cdir))
	e := newCError()
	var ptr *C.llm_tokenizer
	if st := C.llm_tokenizer_create_v2(cdir, &ptr, &e); st != C.LLM_OK {
		return nil, fromCError("llm_tokenizer_create", st, &e)
	}
	return &Tokenizer{ptr: ptr, detok: make(map[*Detokenizer]struct{})}, nil
}

func (t *Tokenizer) enter(op string) error {
	if !t.g.enter() {
		return errClosed(op, "the tokenizer")
	}
	return nil
}

// Close releases the tokenizer and its detokenizers after the calls in progress return. It is
// idempotent.
func (t *Tokenizer) Close() error {
	if !t.g.close() {
		return nil
	}
	t.mu.Lock()
	detoks := t.detok
	t.detok = nil
	t.mu.Unlock()
	for d := range detoks {
		d.destroy()
	}
	C.llm_tokenizer_destroy(t.ptr)
	t.ptr = nil
	return nil
}

// Info returns the tokenizer's family, vocabulary size and BOS / EOS ids.
func (t *Tokenizer) Info() (TokenizerInfo, error) {
	if err := t.enter("Tokenizer.Info"); err != nil {
		return TokenizerInfo{}, err
	}
	defer t.g.leave()
	var ci C.llm_tokenizer_info
	ci.struct_size = C.uint32_t(unsafe.Sizeof(ci))
	if st := C.llm_tokenizer_get_info(t.ptr, &ci); st != C.LLM_OK {
		return TokenizerInfo{}, tokenizerError("llm_tokenizer_get_info", st, t.ptr)
	}
	return TokenizerInfo{Family: TokenizerFamily(ci.family), VocabSize: uint32(ci.vocab_size),
		BOS: int32(ci.bos_id), EOS: int32(ci.eos_id)}, nil
}

// cbytes returns a copy of s's bytes for a C call (nil for ""); Go 1.19 has no way to point at a
// string's own bytes.
func cbytes(s string) *C.char {
	if len(s) == 0 {
		return nil
	}
	b := []byte(s)
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// Encode turns text into token ids. parseSpecial: special tokens written in the text
// ("<|im_end|>") become their ids; false encodes them as plain text.
func (t *Tokenizer) Encode(text string, parseSpecial bool) ([]int32, error) {
	if err := t.enter("Tokenizer.Encode"); err != nil {
		return nil, err
	}
	defer t.g.leave()
	ctext := cbytes(text)
	// A token covers at least one byte of valid text, so len(text) ids suffice unless invalid
	// UTF-8 (each bad byte becomes the three bytes of U+FFFD first) needs the retry below.
	ids := make([]int32, len(text)+1)
	var n C.size_t
	for {
		st := C.llm_tokenize(t.ptr, ctext, C.size_t(len(text)), cbool(parseSpecial),
			(*C.int32_t)(unsafe.Pointer(&ids[0])), C.size_t(len(ids)), &n)
		if st == C.LLM_ERR_BUFFER_TOO_SMALL && int(n) > len(ids) {
			ids = make([]int32, int(n))
			continue
		}
		if st != C.LLM_OK {
			return nil, tokenizerError("llm_tokenize", st, t.ptr)
		}
		break
	}
	return ids[:int(n)], nil
}

// Decode turns ids into text; skipSpecial leaves special tokens out.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) (string, error) {
	if err := t.enter("Tokenizer.Decode"); err != nil {
		return "", err
	}
	defer t.g.leave()
	var cids *C.int32_t
	if len(ids) > 0 {
		cids = (*C.int32_t)(unsafe.Pointer(&ids[0]))
	}
	buf := make([]byte, 8*len(ids)+16)
	var n C.size_t
	for {
		st := C.llm_detokenize(t.ptr, cids, C.size_t(len(ids)), cbool(skipSpecial),
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		if st == C.LLM_ERR_BUFFER_TOO_SMALL && int(n)+1 > len(buf) {
			buf = make([]byte, int(n)+1)
			continue
		}
		if st != C.LLM_OK {
			return "", tokenizerError("llm_detokenize", st, t.ptr)
		}
		return string(buf[:int(n)]), nil
	}
}

// SpecialID returns the id of a special token by its text ("<|im_end|>"); ErrNotFound if none.
func (t *Tokenizer) SpecialID(text string) (int32, error) {
	if err := t.enter("Tokenizer.SpecialID"); err != nil {
		return 0, err
	}
	defer t.g.leave()
	ctext, err := cstring("Tokenizer.SpecialID", "the token text", text)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(ctext))
	var id C.int32_t
	if st := C.llm_tokenizer_special_id(t.ptr, ctext, &id); st != C.LLM_OK {
		return 0, tokenizerError("llm_tokenizer_special_id", st, t.ptr)
	}
	return int32(id), nil
}

// ApplyChatTemplate renders messages in the tokenizer family's chat format; encode the result
// with parseSpecial true. addGenerationPrompt appends the assistant turn opener; enableThinking
// selects GLM's thinking opener.
func (t *Tokenizer) ApplyChatTemplate(messages []ChatMessage, addGenerationPrompt, enableThinking bool) (string, error) {
	if err := t.enter("Tokenizer.ApplyChatTemplate"); err != nil {
		return "", err
	}
	defer t.g.leave()
	for i, m := range messages {
		for _, f := range [2]struct{ what, s string }{{"role", m.Role}, {"content", m.Content}} {
			if j := strings.IndexByte(f.s, 0); j >= 0 {
				return "", &Error{Op: "Tokenizer.ApplyChatTemplate", Status: StatusInvalidArgument,
					Message: "message " + strconv.Itoa(i) + ": the " + f.what + " contains a NUL byte at offset " + strconv.Itoa(j)}
			}
		}
	}
	// The message array holds pointers, so it and its strings live in C memory.
	var msgs *C.llm_chat_message
	if len(messages) > 0 {
		msgs = (*C.llm_chat_message)(C.calloc(C.size_t(len(messages)), C.size_t(unsafe.Sizeof(C.llm_chat_message{}))))
		if msgs == nil {
			return "", &Error{Op: "Tokenizer.ApplyChatTemplate", Status: StatusOutOfMemory, Message: "no memory for the messages"}
		}
		arr := unsafe.Slice(msgs, len(messages))
		defer func() {
			for i := range arr {
				C.free(unsafe.Pointer(arr[i].role))
				C.free(unsafe.Pointer(arr[i].content))
			}
			C.free(unsafe.Pointer(msgs))
		}()
		for i, m := range messages {
			arr[i].role = C.CString(m.Role)
			arr[i].content = C.CString(m.Content)
		}
	}
	size := 256
	for _, m := range messages {
		size += len(m.Role) + len(m.Content) + 16 // plus the format's markers; retried below if short
	}
	buf := make([]byte, size)
	var n C.size_t
	for {
		st := C.llm_chat_apply_template(t.ptr, msgs, C.size_t(len(messages)), cbool(addGenerationPrompt),
			cbool(enableThinking), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		if st == C.LLM_ERR_BUFFER_TOO_SMALL && int(n)+1 > len(buf) {
			buf = make([]byte, int(n)+1)
			continue
		}
		if st != C.LLM_OK {
			return "", tokenizerError("llm_chat_apply_template", st, t.ptr)
		}
		return string(buf[:int(n)]), nil
	}
}

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// Detokenizer turns a stream of ids into text incrementally, emitting only whole UTF-8
// characters (llm_detokenizer). Its methods are serialized, so it may be shared, but its text
// only makes sense in one order of pushes.
type Detokenizer struct {
	tok *Tokenizer
	mu  sync.Mutex // serializes push and flush: the C object takes one thread at a time
	ptr *C.llm_detokenizer
	buf []byte
}

// NewDetokenizer creates an incremental detokenizer; skipSpecial leaves special tokens out. It
// is closed with the tokenizer at the latest.
func (t *Tokenizer) NewDetokenizer(skipSpecial bool) (*Detokenizer, error) {
	if err := t.enter("Tokenizer.NewDetokenizer"); err != nil {
		return nil, err
	}
	defer t.g.leave()
	var ptr *C.llm_detokenizer
	if st := C.llm_detokenizer_create(t.ptr, cbool(skipSpecial), &ptr); st != C.LLM_OK {
		return nil, tokenizerError("llm_detokenizer_create", st, t.ptr)
	}
	d := &Detokenizer{tok: t, ptr: ptr, buf: make([]byte, 256)}
	t.mu.Lock()
	t.detok[d] = struct{}{}
	t.mu.Unlock()
	return d, nil
}

// Push adds a token and returns the text that became ready (possibly "").
func (d *Detokenizer) Push(id int32) (string, error) {
	return d.call("llm_detokenizer_push", id, false)
}

// Flush returns what is held back (an incomplete character becomes U+FFFD) and resets.
func (d *Detokenizer) Flush() (string, error) {
	return d.call("llm_detokenizer_flush", TokenNone, true)
}

func (d *Detokenizer) call(op string, id int32, flush bool) (string, error) {
	if err := d.tok.enter(op); err != nil {
		return "", err
	}
	defer d.tok.g.leave()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ptr == nil {
		return "", errClosed(op, "the detokenizer")
	}
	var n C.size_t
	token := C.int32_t(id)
	for {
		var st C.llm_status
		text := (*C.char)(unsafe.Pointer(&d.buf[0]))
		if flush {
			st = C.llm_detokenizer_flush(d.ptr, text, C.size_t(len(d.buf)), &n)
		} else {
			st = C.llm_detokenizer_push(d.ptr, token, text, C.size_t(len(d.buf)), &n)
		}
		if st == C.LLM_ERR_BUFFER_TOO_SMALL && int(n)+1 > len(d.buf) {
			// The token was taken and its text stays ready: fetch it with a larger buffer.
			d.buf = make([]byte, int(n)+1)
			token = C.int32_t(TokenNone)
			continue
		}
		if st != C.LLM_OK {
			return "", detokenizerError(op, st, d.ptr)
		}
		return string(d.buf[:int(n)]), nil
	}
}

// Close releases the detokenizer; it is idempotent.
func (d *Detokenizer) Close() error {
	if !d.tok.g.enter() {
		return nil // the tokenizer's Close released it
	}
	defer d.tok.g.leave()
	d.tok.mu.Lock()
	if d.tok.detok != nil {
		delete(d.tok.detok, d)
	}
	d.tok.mu.Unlock()
	d.destroy()
	return nil
}

func (d *Detokenizer) destroy() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ptr != nil {
		C.llm_detokenizer_destroy(d.ptr)
		d.ptr = nil
	}
}
