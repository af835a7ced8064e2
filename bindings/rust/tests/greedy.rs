//! Greedy continuations that must be exact: the tiny checkpoint's golden ids (transformers'
//! float32 reference, as the C test checks them) and the shipped model's text (what
//! `llm-run --model models/kimi-k2-kjv-tiny --prompt "In the beginning" --max-tokens 24` prints).

mod common;

use common::*;
use llmrt::{FinishReason, Runtime, RuntimeOptions, Sampling, Tokenizer};

#[test]
fn tiny_golden_by_plain_steps() {
    let got = solo_tokens(&tiny_model(), &f32_kv(), &TINY_PROMPT, &Sampling::greedy().with_max_new_tokens(9));
    assert_eq!(got, TINY_GOLDEN);
}

#[test]
fn tiny_golden_by_pulling_results() {
    let rt = tiny_runtime();
    let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(9)).unwrap();
    s.append_tokens(&TINY_PROMPT).unwrap();
    let mut tokens = Vec::new();
    let mut last = None;
    while let Some(r) = s.next_result().unwrap() {
        assert_eq!(r.session_id, s.id());
        tokens.extend(r.token);
        last = r.finish;
    }
    assert_eq!(tokens, TINY_GOLDEN);
    assert_eq!(last, Some(FinishReason::Length));
    // The generation is over: no more results, and no step is run for nothing.
    let steps = rt.steps_run();
    assert_eq!(s.next_result().unwrap(), None);
    assert_eq!(rt.steps_run(), steps);
}

#[test]
fn tiny_second_turn_continues_the_context() {
    // A new turn after a finished generation: the stream starts again.
    let rt = tiny_runtime();
    let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(4)).unwrap();
    s.append_tokens(&TINY_PROMPT[..]).unwrap();
    assert_eq!(pull_tokens(&s), TINY_GOLDEN[..4]);
    s.append_tokens(&[5, 6]).unwrap();
    let second = pull_tokens(&s);
    assert_eq!(second.len(), 4);
    // The same context in one prompt gives the same tokens.
    let mut context = TINY_PROMPT.to_vec();
    context.extend_from_slice(&TINY_GOLDEN[..4]);
    context.extend_from_slice(&[5, 6]);
    let solo = solo_tokens(&tiny_model(), &f32_kv(), &context, &Sampling::greedy().with_max_new_tokens(4));
    assert_eq!(second, solo);
}

const KJV_CONTINUATION: &str =
    " of the creation of the flesh is the end of the flesh.\nFor the end of this world are ye, which";

#[test]
fn kjv_generate_text() {
    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let text = rt.generate(&tok, "In the beginning", 24, &Sampling::greedy()).unwrap();
    assert_eq!(text, KJV_CONTINUATION);
}

#[test]
fn kjv_stream_tokens_and_text() {
    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let prompt = tok.encode("In the beginning", false).unwrap();
    let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(24)).unwrap();
    s.append_tokens(&prompt).unwrap();
    let mut stream = s.stream(&tok).unwrap();
    let mut ids = Vec::new();
    let mut text = String::new();
    for chunk in stream.by_ref() {
        let chunk = chunk.unwrap();
        ids.push(chunk.token.expect("every item carries a token"));
        text.push_str(&chunk.text);
    }
    assert_eq!(ids.len(), 24);
    assert_eq!(stream.finish_reason(), Some(FinishReason::Length));
    assert_eq!(text, KJV_CONTINUATION);
    // The pieces are the whole decode of the ids.
    assert_eq!(tok.decode(&ids, true).unwrap(), KJV_CONTINUATION);
    let info = s.info().unwrap();
    assert_eq!(info.num_generated, 24);
    assert_eq!(info.num_tokens as usize, prompt.len() + 23); // the last token is not yet in the cache
}
