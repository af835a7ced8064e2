package llmrt

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestGoldenContinuationThroughStream(t *testing.T) {
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32})
	s, err := r.NewSession(&SamplingOptions{MaxNewTokens: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(goldenPrompt); err != nil {
		t.Fatal(err)
	}
	ids, finish := streamIDs(t, s)
	if !equalIDs(ids, goldenTokens) {
		t.Errorf("tokens %v, want %v", ids, goldenTokens)
	}
	if finish != FinishLength {
		t.Errorf("finish %v, want length", finish)
	}
	info, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.State != SessionFinished || info.NumGenerated != 9 || info.NumTokens+1 != uint32(len(goldenPrompt)+9) {
		t.Errorf("session info %+v after the generation", info)
	}
	// The logits of the last sampled position have their maximum at the last token.
	logits, err := s.Logits()
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != 256 {
		t.Fatalf("%d logits, want 256", len(logits))
	}
	for i, l := range logits {
		if l > logits[goldenTokens[8]] {
			t.Fatalf("logit %d (%g) above the sampled token's (%g)", i, l, logits[goldenTokens[8]])
		}
	}
}

func TestGoldenContinuationThroughStep(t *testing.T) {
	// A host that drives the loop itself: two sessions with the same prompt, stepped together.
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32})
	var sessions [2]*Session
	for i := range sessions {
		s, err := r.NewSession(&SamplingOptions{MaxNewTokens: 9})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(goldenPrompt); err != nil {
			t.Fatal(err)
		}
		sessions[i] = s
	}
	got := map[*Session][]int32{}
	finished := 0
	for steps := 0; finished < 2; steps++ {
		if steps > 100 {
			t.Fatal("no finish after 100 steps")
		}
		results, err := r.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range results {
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			if res.Session == nil {
				t.Fatalf("result for unknown session %d", res.SessionID)
			}
			if res.Token != TokenNone {
				got[res.Session] = append(got[res.Session], res.Token)
			}
			if res.Finish != FinishNone {
				finished++
			}
		}
	}
	for i, s := range sessions {
		if !equalIDs(got[s], goldenTokens) {
			t.Errorf("session %d: tokens %v, want %v", i, got[s], goldenTokens)
		}
	}
}

func TestNoLogitsSessionDecodesTheSameTokens(t *testing.T) {
	// Two sessions with the same prompt stepped together, one of them without logits
	// (LLM_SAMPLING_NO_LOGITS): both decode the golden ids, and only the other keeps logits.
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32})
	keep, err := r.NewSession(&SamplingOptions{MaxNewTokens: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	lean, err := r.NewSession(&SamplingOptions{MaxNewTokens: 9, NoLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lean.Close()
	for _, s := range []*Session{keep, lean} {
		if err := s.Append(goldenPrompt); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*Session{keep, lean} {
		ids, finish := streamIDs(t, s)
		if !equalIDs(ids, goldenTokens) || finish != FinishLength {
			t.Errorf("session %d: tokens %v (%v), want %v (length)", s.ID(), ids, finish, goldenTokens)
		}
	}
	info, err := r.Info()
	if err != nil {
		t.Fatal(err)
	}
	if logits, err := keep.Logits(); err != nil || len(logits) != int(info.VocabSize) {
		t.Errorf("logits of the session that keeps them: %d values, %v; want %d", len(logits), err, info.VocabSize)
	}
	logits, err := lean.Logits()
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusInvalidState || !errors.Is(err, ErrInvalidState) || logits != nil {
		t.Fatalf("logits of the NoLogits session: %d values, %v; want an invalid-state *Error", len(logits), err)
	}
	if !strings.Contains(e.Message, "LLM_SAMPLING_NO_LOGITS") {
		t.Errorf("message %q does not name LLM_SAMPLING_NO_LOGITS", e.Message)
	}
}

func TestShippedModelGenerate(t *testing.T) {
	r := openRuntime(t, kjvModel, nil)
	g, err := r.Generate(context.Background(), "In the beginning", SamplingOptions{MaxNewTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	if g.Text != kjvContinuation {
		t.Errorf("text %q,\nwant %q", g.Text, kjvContinuation)
	}
	if len(g.Tokens) != 24 || g.Finish != FinishLength {
		t.Errorf("%d tokens, finish %v; want 24, length", len(g.Tokens), g.Finish)
	}
	// The text is the detokenization of the ids.
	tok, err := r.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	text, err := tok.Decode(g.Tokens, true)
	if err != nil || text != g.Text {
		t.Errorf("Decode(ids) = %q, %v; want the streamed text", text, err)
	}
	// The generation's session was closed: nothing holds pages.
	info, err := r.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.NumSessions != 0 || info.PagesFree != info.PagesTotal {
		t.Errorf("after Generate: %d sessions, %d of %d pages free", info.NumSessions, info.PagesFree, info.PagesTotal)
	}
	if info.Architecture != "DeepseekV3ForCausalLM" || info.ModelType != "kimi_k2" || info.VocabSize != 4096 {
		t.Errorf("info %+v", info)
	}
}

func TestChatStopsAtEndOfTurn(t *testing.T) {
	r := openRuntime(t, kjvModel, nil)
	tok, err := r.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	imEnd, err := tok.SpecialID("<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []ChatMessage{{Role: "user", Content: "Who made the heaven and the earth?"}}
	g, err := r.Chat(context.Background(), msgs, SamplingOptions{MaxNewTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tokens) == 0 || len(g.Tokens) > 40 {
		t.Fatalf("%d tokens", len(g.Tokens))
	}
	// A chat ends at a stop token (reported as the last token) or at the length limit, and a
	// stop token is never in the middle.
	for i, id := range g.Tokens[:len(g.Tokens)-1] {
		if id == imEnd {
			t.Errorf("<|im_end|> at %d of %d tokens", i, len(g.Tokens))
		}
	}
	if g.Finish == FinishStop {
		info, _ := tok.Info()
		if last := g.Tokens[len(g.Tokens)-1]; last != imEnd && last != info.EOS {
			t.Errorf("finish stop at token %d", last)
		}
	} else if g.Finish != FinishLength || len(g.Tokens) != 40 {
		t.Errorf("finish %v after %d tokens", g.Finish, len(g.Tokens))
	}
	// The same conversation, rendered and generated by hand, gives the same text.
	text, err := tok.ApplyChatTemplate(msgs, true, false)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := tok.Info()
	s, err := r.NewSession(&SamplingOptions{MaxNewTokens: 40, StopTokens: []int32{imEnd, info.EOS}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(ids); err != nil {
		t.Fatal(err)
	}
	got, _ := streamIDs(t, s)
	if !equalIDs(got, g.Tokens) {
		t.Errorf("by hand %v, Chat %v", got, g.Tokens)
	}
}

func TestMultiTurnSession(t *testing.T) {
	// After a finished generation the session takes a new turn and streams again; the second
	// turn continues the context as one longer prompt would.
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32})
	s, err := r.NewSession(&SamplingOptions{MaxNewTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(goldenPrompt); err != nil {
		t.Fatal(err)
	}
	first, _ := streamIDs(t, s)
	if !equalIDs(first, goldenTokens[:4]) {
		t.Fatalf("first turn %v, want %v", first, goldenTokens[:4])
	}
	// Next on a finished session has nothing to wait for.
	if _, err := s.Next(context.Background()); !isStatus(err, StatusInvalidState) {
		t.Errorf("Next after the finish: %v, want invalid state", err)
	}
	// The last generated token is kept in the context; appending nothing new continues greedily.
	if err := s.Append([]int32{goldenTokens[4]}); err != nil {
		t.Fatal(err)
	}
	second, _ := streamIDs(t, s)
	if !equalIDs(second, goldenTokens[5:9]) {
		t.Errorf("second turn %v, want %v", second, goldenTokens[5:9])
	}
}
