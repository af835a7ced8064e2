//! Scoring, logits and KV export / import through the binding.

mod common;

use common::*;
use llmrt::{Sampling, Status};

#[test]
fn score_predicts_the_golden_continuation() {
    let rt = tiny_runtime();
    let mut seq = TINY_PROMPT.to_vec();
    seq.extend_from_slice(&TINY_GOLDEN);
    let (logprobs, argmax) = rt.score(&seq).unwrap();
    assert_eq!(logprobs.len(), seq.len() - 1);
    // Teacher-forced top-1 after the prompt is the greedy continuation.
    assert_eq!(argmax[TINY_PROMPT.len() - 1..], TINY_GOLDEN[..]);
    assert!(logprobs.iter().all(|l| l.is_finite() && *l <= 0.0));
    assert_eq!(rt.score(&[1]).unwrap_err().status, Status::InvalidArgument);
}

#[test]
fn logits_of_the_last_sampled_position() {
    let rt = tiny_runtime();
    let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(2)).unwrap();
    assert_eq!(s.logits().unwrap_err().status, Status::InvalidState);
    s.append_tokens(&TINY_PROMPT).unwrap();
    let r = s.next_result().unwrap().unwrap();
    assert_eq!(r.token, Some(TINY_GOLDEN[0]));
    let logits = s.logits().unwrap();
    assert_eq!(logits.len(), rt.info().unwrap().vocab_size as usize);
    let best = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap();
    assert_eq!(best as i32, TINY_GOLDEN[0]);
}

#[test]
fn a_session_without_logits_decodes_the_same_tokens() {
    // Both sessions in one runtime, so they share every step: the one that keeps its logits and
    // the one that does not (LLM_SAMPLING_NO_LOGITS) get the golden ids alike.
    let rt = tiny_runtime();
    let keep = rt.create_session(&Sampling::greedy().with_max_new_tokens(9)).unwrap();
    let lean = rt.create_session(&Sampling::greedy().with_max_new_tokens(9).without_logits()).unwrap();
    assert!(!Sampling::greedy().without_logits().keep_logits && Sampling::default().keep_logits);
    keep.append_tokens(&TINY_PROMPT).unwrap();
    lean.append_tokens(&TINY_PROMPT).unwrap();
    assert_eq!(pull_tokens(&keep), TINY_GOLDEN);
    assert_eq!(pull_tokens(&lean), TINY_GOLDEN);
    assert_eq!(keep.logits().unwrap().len(), rt.info().unwrap().vocab_size as usize);
    let err = lean.logits().unwrap_err();
    assert_eq!(err.status, Status::InvalidState, "{err}");
    assert!(err.message.contains("LLM_SAMPLING_NO_LOGITS"), "{err}");
    // Flag bits the header does not define are refused at creation, and create nothing.
    let mut session = std::ptr::null_mut();
    let mut raw = std::mem::MaybeUninit::<llmrt::sys::llm_sampling_options>::zeroed();
    // SAFETY: init fills every field; then a live runtime, options without stop tokens and a
    // valid out pointer.
    let code = unsafe {
        llmrt::sys::llm_sampling_options_init(raw.as_mut_ptr());
        let mut raw = raw.assume_init();
        raw.flags = llmrt::sys::LLM_SAMPLING_NO_LOGITS | 0x2;
        llmrt::sys::llm_session_create(rt.as_ptr(), &raw, &mut session)
    };
    assert_eq!(code, llmrt::sys::LLM_ERR_INVALID_ARGUMENT);
    assert!(session.is_null());
    assert_eq!(rt.info().unwrap().num_sessions, 2);
}

#[test]
fn export_then_import_continues_exactly() {
    let prefill = tiny_runtime();
    let decode = tiny_runtime();
    let s = prefill.create_session(&Sampling::greedy()).unwrap();
    s.append_tokens(&TINY_PROMPT).unwrap();
    for want in &TINY_GOLDEN[..3] {
        assert_eq!(s.next_result().unwrap().unwrap().token, Some(*want));
    }
    let blob = s.export_kv().unwrap();
    assert!(!blob.is_empty());
    let moved = decode.import_kv(&blob, &Sampling::greedy()).unwrap();
    let mut rest = Vec::new();
    while rest.len() < 6 {
        let r = moved.next_result().unwrap().expect("the imported session runs");
        rest.extend(r.token);
    }
    assert_eq!(rest, TINY_GOLDEN[3..]);
    // A damaged blob is refused with a status, and creates nothing.
    let mut bad = blob.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    let err = decode.import_kv(&bad, &Sampling::greedy()).err().unwrap();
    assert_eq!(err.status, Status::Format, "{err}");
    assert_eq!(decode.info().unwrap().num_sessions, 1);
}

#[test]
fn int8_activations_change_int4_products_only_slightly() {
    use llmrt::{Activations, Runtime, RuntimeOptions, Weights};
    let int4 = RuntimeOptions { prefill_weights: Weights::Int4G32, decode_weights: Weights::Int4G32, ..f32_kv() };
    let exact = Runtime::new(tiny_model(), &int4).unwrap();
    let int8 =
        Runtime::new(tiny_model(), &RuntimeOptions { quantized_activations: Activations::Int8, ..int4.clone() }).unwrap();
    let mut seq = TINY_PROMPT.to_vec();
    seq.extend_from_slice(&TINY_GOLDEN);
    let (a, _) = exact.score(&seq).unwrap();
    let (b, _) = int8.score(&seq).unwrap();
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    // The policy reaches the engine (products differ) and rounds each activation by at most
    // 1/254 of its block's largest value: log-probabilities move by well under 0.5.
    assert!(diff > 0.0 && diff < 0.5, "max |logprob difference| {diff}");
}

#[test]
fn bf16_activations_change_bf16_products_only_slightly() {
    use llmrt::{Activations, Runtime, RuntimeOptions};
    let exact = Runtime::new(tiny_model(), &f32_kv()).unwrap();
    let bf16 =
        Runtime::new(tiny_model(), &RuntimeOptions { quantized_activations: Activations::Bf16, ..f32_kv() }).unwrap();
    let mut seq = TINY_PROMPT.to_vec();
    seq.extend_from_slice(&TINY_GOLDEN);
    let (a, _) = exact.score(&seq).unwrap();
    let (b, _) = bf16.score(&seq).unwrap();
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    // The policy reaches the engine (the BF16 model's products differ); bf16 rounds each
    // activation by at most 2^-9 of itself: log-probabilities move by well under 0.5.
    assert!(diff > 0.0 && diff < 0.5, "max |logprob difference| {diff}");
}

#[test]
fn fp8_activations_create_and_generate() {
    // The FP8 policy reaches the library: the BF16 and the FP8 block-scaled checkpoints open
    // under it and decode the golden prompt's full length.
    use llmrt::{Activations, Runtime, RuntimeOptions};
    for model in [tiny_model(), repo().join("tests/data/tiny_kimi_k2_fp8")] {
        let rt = Runtime::new(&model, &RuntimeOptions { quantized_activations: Activations::Fp8, ..f32_kv() })
            .unwrap_or_else(|e| panic!("{}: {e}", model.display()));
        let s = rt.create_session(&Sampling::greedy().with_max_new_tokens(TINY_GOLDEN.len() as u32)).unwrap();
        s.append_tokens(&TINY_PROMPT).unwrap();
        assert_eq!(pull_tokens(&s).len(), TINY_GOLDEN.len(), "{}", model.display());
    }
}

#[test]
fn weight_memory_moves_bytes_not_results() {
    use llmrt::{Runtime, RuntimeOptions, WeightMemory};
    let mapped =
        Runtime::new(tiny_model(), &RuntimeOptions { weight_memory: WeightMemory::Mapped, ..f32_kv() }).unwrap();
    let copied =
        Runtime::new(tiny_model(), &RuntimeOptions { weight_memory: WeightMemory::HugePages, ..f32_kv() }).unwrap();
    assert_eq!(mapped.info().unwrap().weight_memory, llmrt::sys::LLM_WEIGHT_MEMORY_MAPPED);
    assert_eq!(copied.info().unwrap().weight_memory, llmrt::sys::LLM_WEIGHT_MEMORY_HUGE_PAGES);
    let mut seq = TINY_PROMPT.to_vec();
    seq.extend_from_slice(&TINY_GOLDEN);
    // Where the weights live changes no arithmetic: the same log-probabilities, bit for bit.
    assert_eq!(mapped.score(&seq).unwrap(), copied.score(&seq).unwrap());
}

#[test]
fn authenticated_transfer_needs_the_same_key() {
    let a = tiny_runtime();
    let b = tiny_runtime();
    let s = a.create_session(&Sampling::greedy()).unwrap();
    s.append_tokens(&TINY_PROMPT).unwrap();
    assert_eq!(s.next_result().unwrap().unwrap().token, Some(TINY_GOLDEN[0]));
    let key = [7u8; 32];
    let sealed = s.export_kv_authenticated(&key).unwrap();
    let err = b.import_kv_authenticated(&sealed, &[8u8; 32], &Sampling::greedy()).err().unwrap();
    assert_eq!(err.status, Status::Format, "{err}");
    assert_eq!(b.import_kv(&sealed, &Sampling::greedy()).err().unwrap().status, Status::InvalidArgument);
    let moved = b.import_kv_authenticated(&sealed, &key, &Sampling::greedy()).unwrap();
    let r = moved.next_result().unwrap().expect("the imported session runs");
    assert_eq!(r.token, Some(TINY_GOLDEN[1]));
}

#[test]
fn kv_sizing_matches_the_runtime() {
    use llmrt::{KvDtype, Runtime, RuntimeOptions};
    let opts = RuntimeOptions { kv_budget_bytes: 1 << 20, page_size_tokens: 16, ..f32_kv() };
    let z = llmrt::model_kv_sizing(tiny_model(), KvDtype::F32, 1 << 20, 16, 64, 1).unwrap();
    let info = Runtime::new(tiny_model(), &opts).unwrap().info().unwrap();
    assert_eq!(z.kv_dtype, llmrt::sys::LLM_KV_DTYPE_F32);
    assert_eq!(z.bytes_per_token, info.kv_bytes_per_token);
    assert_eq!(z.capacity_tokens, u64::from(info.pages_total) * 16);
    assert_eq!(z.max_sessions, z.capacity_tokens / 64);
    let err = llmrt::model_kv_sizing("/nonexistent/llmrt-model", KvDtype::Auto, 0, 0, 0, 1).err().unwrap();
    assert_eq!(err.status, Status::NotFound, "{err}");
}
