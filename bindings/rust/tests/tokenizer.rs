//! Tokenizer, detokenizer and chat through the binding, and the thread-safety markers.

mod common;

use common::*;
use llmrt::{
    ChatMessage, Detokenizer, FinishReason, Runtime, RuntimeOptions, Sampling, Session, Status, Tokenizer,
    TokenizerFamily,
};

const TEXT: &str = "In the beginning God created the heaven and the earth. «Über» 世界 🙂 — and the end.";

#[test]
fn encode_decode_round_trip() {
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let info = tok.info().unwrap();
    assert_eq!(info.family, TokenizerFamily::Kimi);
    assert!(info.eos_id.is_some());
    let ids = tok.encode(TEXT, false).unwrap();
    assert!(ids.len() > 20);
    assert_eq!(tok.decode(&ids, false).unwrap(), TEXT);
    // A long output takes the buffer protocol's second call.
    let long: String = TEXT.repeat(40);
    let ids = tok.encode(&long, false).unwrap();
    assert_eq!(tok.decode(&ids, true).unwrap(), long);
}

#[test]
fn detokenizer_streams_whole_characters() {
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let ids = tok.encode(TEXT, false).unwrap();
    let mut detok = tok.detokenizer(true).unwrap();
    let mut out = String::new();
    let mut held_back = 0;
    for &id in &ids {
        let piece = detok.push(id).unwrap();
        if piece.is_empty() {
            held_back += 1;
        }
        out.push_str(&piece);
    }
    out.push_str(&detok.flush().unwrap());
    assert_eq!(out, TEXT);
    assert!(held_back > 0, "the CJK and emoji characters span several byte tokens");
    // A bad id is refused with a message and not taken; the detokenizer keeps working.
    let err = detok.push(1 << 28).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(!err.message.is_empty());
    assert_eq!(detok.push(ids[0]).unwrap(), tok.decode(&ids[..1], true).unwrap());
    // An incomplete character at the end is flushed as U+FFFD.
    let emoji = tok.encode("🙂", false).unwrap();
    assert!(emoji.len() > 1);
    let mut detok = tok.detokenizer(true).unwrap();
    assert_eq!(detok.push(emoji[0]).unwrap(), "");
    assert_eq!(detok.flush().unwrap(), "\u{FFFD}");
}

#[test]
fn special_tokens_and_chat() {
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let im_end = tok.special_id("<|im_end|>").unwrap().expect("Kimi has <|im_end|>");
    assert_eq!(tok.special_id("<|no such token|>").unwrap(), None);
    let stops = tok.chat_stop_tokens().unwrap();
    assert!(stops.contains(&im_end) && stops.contains(&tok.info().unwrap().eos_id.unwrap()));
    let messages = [ChatMessage::system("You are a scribe."), ChatMessage::user("Who made the heaven?")];
    let rendered = tok.apply_chat_template(&messages, true, false).unwrap();
    assert!(rendered.contains("Who made the heaven?") && rendered.contains("<|im_end|>"), "{rendered}");
    let ids = llmrt::chat_prompt(&tok, &messages).unwrap();
    assert!(ids.contains(&im_end), "special tokens are parsed in the rendered chat");
    assert!(!tok.encode("<|im_end|>", false).unwrap().contains(&im_end), "plain text stays text");

    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    let reply = rt.chat(&tok, &messages, &Sampling::greedy().with_max_new_tokens(40)).unwrap();
    assert!(!reply.contains("<|im_end|>"));
    // The same through a stream: it ends at a stop token or the limit, with text.
    let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(40).with_stop_tokens(stops)).unwrap();
    s.append_tokens(&ids).unwrap();
    let mut stream = s.stream(&tok).unwrap();
    let text: String = stream.by_ref().map(|c| c.unwrap().text).collect();
    assert_eq!(text, reply);
    assert!(matches!(stream.finish_reason(), Some(FinishReason::Stop | FinishReason::Length)));
}

#[test]
fn sampling_is_reproducible_by_seed() {
    let rt = Runtime::new(kjv_model(), &RuntimeOptions::default()).unwrap();
    let tok = Tokenizer::new(kjv_model()).unwrap();
    let a = rt.generate(&tok, "And God said", 30, &Sampling::temperature(0.9, 7)).unwrap();
    let b = rt.generate(&tok, "And God said", 30, &Sampling::temperature(0.9, 7)).unwrap();
    assert_eq!(a, b);
    let greedy = rt.generate(&tok, "And God said", 30, &Sampling::greedy()).unwrap();
    let others: Vec<String> =
        (1..=4).map(|seed| rt.generate(&tok, "And God said", 30, &Sampling::temperature(1.5, seed)).unwrap()).collect();
    assert!(others.iter().any(|o| *o != greedy), "sampling at temperature 1.5 never left the greedy path");
}

#[test]
fn thread_safety_markers_follow_the_header() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Runtime>();
    send_sync::<Session<'static>>();
    send_sync::<Tokenizer>();
    send::<Detokenizer<'static>>();
    send_sync::<llmrt::Error>();
    // Detokenizer is not Sync: see the compile_fail example in the crate documentation.
}
