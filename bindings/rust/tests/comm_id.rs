//! Group ids (`CommId`, llm_comm_id_create) and the runtime option that carries one: ids are
//! distinct, bad backends are refused, the serialized form round-trips, and a runtime of a
//! two-process group checks the id before joining (no MPI process is started: every case here
//! fails, or is ignored, before the ranks would meet).

mod common;

use common::*;
use llmrt::{sys, Backend, CommId, Runtime, RuntimeOptions, Status};

/// Rank 0 of a two-process group, on the tiny model's options.
fn two_ranks(id: &CommId) -> RuntimeOptions {
    RuntimeOptions { collective_timeout_ms: 2000, ..f32_kv() }.with_world(2, 0).with_comm_id(id)
}

#[test]
fn cpu_ids_are_distinct_and_round_trip() {
    let a = CommId::create(Backend::Cpu).expect("a CPU id");
    let b = CommId::create(Backend::Cpu).expect("a CPU id");
    assert_eq!(a.backend(), Backend::Cpu);
    assert_ne!(a, b, "two ids of different groups are equal");
    assert_ne!(a.id_bytes(), b.id_bytes());
    assert!(a.id_bytes().iter().any(|&x| x != 0));

    // The serialized form is the C struct: backend, reserved 0, then the 128 id bytes.
    let bytes = a.as_bytes();
    assert_eq!(bytes.len(), 136);
    assert_eq!(CommId::SIZE, std::mem::size_of::<sys::llm_comm_id>());
    assert_eq!(bytes[0..4], sys::LLM_BACKEND_CPU.to_ne_bytes());
    assert_eq!(bytes[4..8], [0, 0, 0, 0]);
    assert_eq!(&bytes[8..], a.id_bytes());
    let back = CommId::from_bytes(&bytes).expect("its own bytes");
    assert_eq!(back, a);
    assert_eq!(back.as_bytes(), bytes);
}

#[test]
fn malformed_serialized_ids_are_refused() {
    let bytes = CommId::create(Backend::Cpu).unwrap().as_bytes();
    for len in [0, 128, 135, 137] {
        let v: Vec<u8> = bytes.iter().copied().cycle().take(len).collect();
        let err = CommId::from_bytes(&v).unwrap_err();
        assert_eq!(err.status, Status::InvalidArgument);
        assert!(err.message.contains("136") && err.message.contains(&len.to_string()), "{}", err.message);
    }
    let mut b = bytes;
    b[0..4].copy_from_slice(&sys::LLM_BACKEND_AUTO.to_ne_bytes());
    let err = CommId::from_bytes(&b).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("backend is 0"), "{}", err.message);
    let mut b = bytes;
    b[4] = 1;
    let err = CommId::from_bytes(&b).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("reserved"), "{}", err.message);
}

#[test]
fn bad_backends_and_null_are_invalid_argument() {
    let err = CommId::create(Backend::Auto).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("backend"), "{}", err.message);
    // What the safe API cannot express, through the raw declarations.
    let mut raw = sys::llm_comm_id { backend: 0, reserved: 0, bytes: [0; sys::LLM_COMM_ID_BYTES] };
    // SAFETY: a valid struct, then NULL, which the library refuses.
    unsafe {
        assert_eq!(sys::llm_comm_id_create(77, &mut raw), sys::LLM_ERR_INVALID_ARGUMENT);
        assert_eq!(sys::llm_comm_id_create(sys::LLM_BACKEND_CPU, std::ptr::null_mut()), sys::LLM_ERR_INVALID_ARGUMENT);
    }
    assert_eq!(Status::from_raw(sys::LLM_ERR_INVALID_ARGUMENT), Some(Status::InvalidArgument));
}

#[test]
fn a_cuda_id_is_refused_by_multi_process_ranks() {
    // NCCL's unique id where libnccl.so.2 loads (it needs no GPU); elsewhere Unsupported, naming
    // NCCL, and the runtime's refusal is checked with a CUDA-kind id made from bytes.
    let id = match CommId::create(Backend::Cuda) {
        Ok(id) => {
            assert_eq!(id.backend(), Backend::Cuda);
            id
        }
        Err(err) => {
            assert_eq!(err.status, Status::Unsupported, "{err}");
            assert!(err.message.contains("NCCL"), "{}", err.message);
            let mut bytes = [0u8; CommId::SIZE];
            bytes[0..4].copy_from_slice(&sys::LLM_BACKEND_CUDA.to_ne_bytes());
            CommId::from_bytes(&bytes).unwrap()
        }
    };
    let err = Runtime::new(tiny_model(), &two_ranks(&id)).err().expect("a CUDA id with world_size 2 fails");
    assert_eq!(err.status, Status::Unsupported, "{err}");
    assert!(err.message.contains("comm_id was made for CUDA ranks"), "{}", err.message);
}

#[test]
fn a_forged_cpu_id_is_refused_before_joining() {
    let mut bytes = CommId::create(Backend::Cpu).unwrap().as_bytes();
    bytes[8] ^= 1; // the first id byte
    let forged = CommId::from_bytes(&bytes).unwrap();
    let err = Runtime::new(tiny_model(), &two_ranks(&forged)).err().expect("a forged id with world_size 2 fails");
    assert_eq!(err.status, Status::InvalidArgument, "{err}");
    assert!(err.message.contains("not a CPU (MPI) group id"), "{}", err.message);
}

#[test]
fn one_process_ignores_the_id() {
    let mut bytes = CommId::create(Backend::Cpu).unwrap().as_bytes();
    bytes[8] ^= 1;
    let forged = CommId::from_bytes(&bytes).unwrap();
    let options = RuntimeOptions { tensor_parallel: 2, ..f32_kv() }.with_comm_id(&forged);
    assert_eq!(options.world_size, 1);
    let rt = Runtime::new(tiny_model(), &options).expect("world_size 1 does not read the id");
    let s = rt.create_session(&llmrt::Sampling::greedy().with_max_new_tokens(TINY_GOLDEN.len() as u32)).unwrap();
    s.append_tokens(&TINY_PROMPT).unwrap();
    assert_eq!(pull_tokens(&s), TINY_GOLDEN);
}
