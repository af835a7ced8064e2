package llmrt

import (
	"context"
	"sync"
)

// Token is one generated token with its text piece. The piece holds whole UTF-8 characters
// only, so it may be "" (a character still incomplete, or a special token, which streams leave
// out); the text held back comes with a later token. At the end of a stream, text that could
// not be attached to a token comes as a Token with ID TokenNone.
type Token struct {
	ID   int32
	Text string
}

// TokenStream reads a session's generation token by token, in the manner of bufio.Scanner:
//
//	for ts.Next() {
//		fmt.Print(ts.Token().Text)
//	}
//	if err := ts.Err(); err != nil { ... }
//	reason := ts.FinishReason()
//
// Next may be called from one goroutine at a time; streams of different sessions may be read
// from different goroutines at once (their steps are batched). When the stream's context is
// done, the session is cancelled and the stream ends with FinishCancelled and the context's error.
type TokenStream struct {
	s          *Session
	ctx        context.Context
	det        *Detokenizer // nil without a tokenizer (ids only)
	ownSession bool

	cur        Token
	finish     FinishReason
	err        error
	ending     bool // the finish was read: the next Next returns false
	cancelling bool // the context is done and the session was cancelled
	done       bool

	stopWatch chan struct{} // closed when the stream ends, to stop the context watcher
	watchDone sync.WaitGroup
}

// Stream reads the session's current generation (its queued prompt must already be appended).
// tok, when not nil, gives each token its text (special tokens left out); nil yields ids only.
// Closing the stream before its end cancels the generation; the session stays open (and may
// then not take a new turn). So does a step failure from which the session could go on later
// (LLM_ERR_KV_EXHAUSTED under the fail policy, a failed pass): the stream ends with the error,
// carrying the library's message for the session, and the generation is cancelled. After a
// complete generation the session may take a new turn and be streamed again.
func (s *Session) Stream(ctx context.Context, tok *Tokenizer) (*TokenStream, error) {
	return s.stream(ctx, tok, false)
}

func (s *Session) stream(ctx context.Context, tok *Tokenizer, ownSession bool) (*TokenStream, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ts := &TokenStream{s: s, ctx: ctx, ownSession: ownSession}
	if tok != nil {
		d, err := tok.NewDetokenizer(true)
		if err != nil {
			return nil, err
		}
		ts.det = d
	}
	if ctx.Done() != nil {
		// Cancel the session as soon as ctx is done, also while this stream's goroutine waits in
		// a step: the cancel takes effect at once and the next step reports it.
		ts.stopWatch = make(chan struct{})
		ts.watchDone.Add(1)
		go func() {
			defer ts.watchDone.Done()
			select {
			case <-ctx.Done():
				s.Cancel()
			case <-ts.stopWatch:
			}
		}()
	}
	return ts, nil
}

// Next advances to the next token; false at the end of the generation or on an error.
func (ts *TokenStream) Next() bool {
	if ts.done {
		return false
	}
	if ts.ending {
		ts.end()
		return false
	}
	for {
		// Once the context is done the stream yields no more tokens: the session is cancelled
		// here (the watcher may not have run yet) and the stream reads on, dropping tokens that
		// were already queued, until the step that reports the cancellation. ts.s.Next is
		// therefore not given ts.ctx.
		if !ts.cancelling && ts.ctx.Err() != nil {
			ts.cancelling = true
			ts.s.Cancel()
		}
		res, err := ts.s.Next(context.Background())
		if err != nil {
			ts.fail(err)
			return false
		}
		// A cancelled session's last result carries StatusCancelled: that is its finish.
		if res.Status != StatusOK && res.Finish != FinishCancelled {
			err := ts.s.stepError(res)
			ts.finish = res.Finish
			if ts.finish == FinishNone {
				// The session did not advance but could on a later step (KV pages exhausted, a
				// failed pass): the stream ends here, so its generation is cancelled rather than
				// left running with no reader.
				ts.finish = FinishError
				ts.s.Cancel()
			}
			ts.fail(err)
			return false
		}
		if ts.cancelling && res.Finish == FinishNone {
			continue
		}
		tok := Token{ID: res.Token}
		if res.Token != TokenNone && ts.det != nil {
			text, err := ts.det.Push(res.Token)
			if err != nil {
				ts.fail(err)
				return false
			}
			tok.Text = text
		}
		if res.Finish != FinishNone {
			ts.finish = res.Finish
			ts.ending = true
			if ts.det != nil {
				rest, err := ts.det.Flush()
				if err != nil {
					ts.fail(err)
					return false
				}
				tok.Text += rest
			}
			if res.Finish == FinishCancelled {
				ts.err = ts.ctx.Err()
			}
			if tok.ID == TokenNone && tok.Text == "" {
				ts.end()
				return false
			}
			ts.cur = tok
			return true
		}
		if res.Token != TokenNone {
			ts.cur = tok
			return true
		}
		// A prefill chunk without a token yet: step again.
	}
}

// Token is the token Next advanced to.
func (ts *TokenStream) Token() Token { return ts.cur }

// FinishReason is why the generation ended (FinishNone before the end).
func (ts *TokenStream) FinishReason() FinishReason { return ts.finish }

// Err is the error that ended the stream: nil after a normal finish (stop token, length, or a
// Session.Cancel), the context's error when the stream's context ended it, else an *Error.
func (ts *TokenStream) Err() error { return ts.err }

// Session is the session the stream reads.
func (ts *TokenStream) Session() *Session { return ts.s }

// Close ends the stream: a generation still running is cancelled, and what the stream owns (its
// detokenizer; the session of Runtime.GenerateStream / ChatStream) is released. Idempotent.
func (ts *TokenStream) Close() error {
	if ts.done {
		return nil
	}
	if !ts.ending {
		ts.s.Cancel() // best effort: the session may already be closed
		if ts.finish == FinishNone {
			ts.finish = FinishCancelled
		}
	}
	ts.end()
	return nil
}

func (ts *TokenStream) fail(err error) {
	if ts.err == nil {
		ts.err = err
	}
	ts.end()
}

func (ts *TokenStream) end() {
	if ts.done {
		return
	}
	ts.done = true
	ts.cur = Token{}
	if ts.stopWatch != nil {
		close(ts.stopWatch)
		ts.watchDone.Wait()
	}
	if ts.det != nil {
		ts.det.Close()
	}
	if ts.ownSession {
		ts.s.Close()
	}
}
