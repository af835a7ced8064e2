package llmrt

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestTokenizerRoundTripAndDetokenizer(t *testing.T) {
	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	info, err := tok.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Family != TokenizerKimi || info.VocabSize == 0 || info.EOS < 0 {
		t.Errorf("info %+v", info)
	}
	for _, text := range []string{"", "In the beginning God created the heaven and the earth.",
		"日本語とemoji 🙂 and combining e\u0301", "  many   spaces\n\n\ttabs"} {
		ids, err := tok.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		back, err := tok.Decode(ids, false)
		if err != nil || back != text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", text, back, err)
		}
		// Pushed one id at a time, the detokenizer yields whole characters that add up to the text.
		d, err := tok.NewDetokenizer(true)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		for _, id := range ids {
			piece, err := d.Push(id)
			if err != nil {
				t.Fatal(err)
			}
			if !utf8Valid(piece) {
				t.Errorf("piece %q is not whole UTF-8", piece)
			}
			sb.WriteString(piece)
		}
		rest, err := d.Flush()
		if err != nil {
			t.Fatal(err)
		}
		sb.WriteString(rest)
		if sb.String() != text {
			t.Errorf("detokenized %q, want %q", sb.String(), text)
		}
		d.Close()
		d.Close()
	}
	// Special tokens: parsed only when asked, left out of streams.
	imEnd, err := tok.SpecialID("<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.Encode("a<|im_end|>", true)
	if len(ids) != 2 || ids[1] != imEnd {
		t.Errorf("Encode(parse specials) = %v, want [.., %d]", ids, imEnd)
	}
	if ids, _ := tok.Encode("a<|im_end|>", false); len(ids) < 3 {
		t.Errorf("Encode(no specials) = %v", ids)
	}
	if s, _ := tok.Decode([]int32{imEnd}, true); s != "" {
		t.Errorf("skip special: %q", s)
	}
	if s, _ := tok.Decode([]int32{imEnd}, false); s != "<|im_end|>" {
		t.Errorf("keep special: %q", s)
	}
	// Special tokens are longer than the first guess of the output size (8 bytes per id).
	specials := make([]int32, 50)
	for i := range specials {
		specials[i] = imEnd
	}
	if s, err := tok.Decode(specials, false); err != nil || s != strings.Repeat("<|im_end|>", 50) {
		t.Errorf("50 specials: %q, %v", s, err)
	}
}

func TestLongTextNeedsLargerBuffers(t *testing.T) {
	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	// A text whose pieces are far longer than the initial buffers.
	long := strings.Repeat("And the evening and the morning were the first day. ", 2000)
	ids, err := tok.Encode(long, false)
	if err != nil {
		t.Fatal(err)
	}
	back, err := tok.Decode(ids, false)
	if err != nil || back != long {
		t.Errorf("round trip of %d bytes: %d bytes back, %v", len(long), len(back), err)
	}
	msgs := []ChatMessage{{Role: "system", Content: long}, {Role: "user", Content: "Amen."}}
	text, err := tok.ApplyChatTemplate(msgs, true, false)
	if err != nil || !strings.Contains(text, long) || !strings.Contains(text, "Amen.") {
		t.Errorf("chat template of %d bytes: %d bytes, %v", len(long), len(text), err)
	}
}

func TestChatTemplate(t *testing.T) {
	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	text, err := tok.ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "Hello"}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	// Kimi's format: the user turn, then the assistant opener.
	if !strings.Contains(text, "<|im_user|>") || !strings.Contains(text, "Hello") ||
		!strings.HasSuffix(text, "<|im_middle|>") {
		t.Errorf("chat text %q", text)
	}
	// Many short messages render longer than the first guess of the output size.
	many := make([]ChatMessage, 40)
	for i := range many {
		many[i] = ChatMessage{Role: "user", Content: ""}
	}
	text, err = tok.ApplyChatTemplate(many, false, false)
	if err != nil || strings.Count(text, "<|im_user|>") != 40 {
		t.Errorf("40 empty messages: %q, %v", text, err)
	}
	if _, err := tok.ApplyChatTemplate([]ChatMessage{{Role: "wizard", Content: "x"}}, true, false); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unknown role: %v", err)
	}
}

func TestTokenizerConcurrentUse(t *testing.T) {
	tok, err := NewTokenizer(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tok.Encode("The grace of our Lord Jesus Christ be with you all. Amen.", false)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 50; k++ {
				got, err := tok.Encode("The grace of our Lord Jesus Christ be with you all. Amen.", false)
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Error(err)
					return
				}
				if err == nil && !equalIDs(got, want) {
					t.Errorf("%v != %v", got, want)
					return
				}
			}
		}()
	}
	tok.Close() // waits for the calls in flight; the later ones get ErrClosed
	wg.Wait()
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
