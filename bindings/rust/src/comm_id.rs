//! `CommId`: the id of a multi-process group of ranks (`llm_comm_id`).

use std::fmt;

use crate::error::{from_last_error, Error, Result};
use crate::options::Backend;
use crate::sys;

/// The id of a multi-process group of ranks (the header's `llm_comm_id`): one process makes it
/// with [`CommId::create`], the host hands the same bytes to every process of the group (a file,
/// its own RPC...) and each passes it as [`RuntimeOptions::comm_id`](crate::RuntimeOptions).
/// Every rank checks it against rank 0's when it joins, so processes given different ids refuse
/// to compute together.
///
/// The serialized form ([`as_bytes`](CommId::as_bytes) / [`from_bytes`](CommId::from_bytes)) is
/// the whole C struct, [`CommId::SIZE`] = 136 bytes: the backend (`i32`), a reserved `u32` (0)
/// and the 128 opaque bytes, in the struct's memory order (that of the host; little-endian on
/// every platform llmrt builds for). It is thus byte for byte what a C host writes with
/// `fwrite(&id, sizeof id, 1, f)`, and the Go and Python bindings use the same form. The backend
/// travels with the bytes because the library reads the id differently for CPU and CUDA ranks.
#[derive(Clone, Copy)]
pub struct CommId {
    raw: sys::llm_comm_id,
}

impl CommId {
    /// Bytes of the serialized form: `size_of::<llm_comm_id>()`.
    pub const SIZE: usize = std::mem::size_of::<sys::llm_comm_id>();

    /// Makes a new group id for ranks on `backend`: `Backend::Cpu` (ranks joined through MPI; a
    /// random tag), or `Backend::Cuda` (NCCL's unique id, `Status::Unsupported` where NCCL cannot
    /// be loaded; make it on the host of rank 0). `Backend::Auto` is `Status::InvalidArgument`.
    pub fn create(backend: Backend) -> Result<CommId> {
        let mut raw = zeroed();
        // SAFETY: raw is a valid llm_comm_id for the call to fill.
        let code = unsafe { sys::llm_comm_id_create(backend.to_raw(), &mut raw) };
        if code != sys::LLM_OK {
            // No handle records this call's error: the thread's message, read on the same thread.
            return Err(from_last_error(code));
        }
        Ok(CommId { raw })
    }

    /// The id's serialized form (see the type's documentation).
    pub fn as_bytes(&self) -> [u8; CommId::SIZE] {
        let mut out = [0u8; CommId::SIZE];
        out[0..4].copy_from_slice(&self.raw.backend.to_ne_bytes());
        out[4..8].copy_from_slice(&self.raw.reserved.to_ne_bytes());
        out[8..].copy_from_slice(&self.raw.bytes);
        out
    }

    /// An id from its serialized form, as another process's `as_bytes` (or a C host's struct)
    /// gave it. Refused with `Status::InvalidArgument`: a length other than 136, a backend other
    /// than CPU or CUDA, a reserved word other than 0. The 128 opaque bytes are checked by the
    /// library when a runtime is created with the id.
    pub fn from_bytes(bytes: &[u8]) -> Result<CommId> {
        if bytes.len() != CommId::SIZE {
            return Err(Error::invalid_argument(format!(
                "a serialized CommId is {} bytes (backend, reserved, {} id bytes), not {}",
                CommId::SIZE,
                sys::LLM_COMM_ID_BYTES,
                bytes.len()
            )));
        }
        let word = |i: usize| [bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]];
        let backend = i32::from_ne_bytes(word(0));
        let reserved = u32::from_ne_bytes(word(4));
        if backend != sys::LLM_BACKEND_CPU && backend != sys::LLM_BACKEND_CUDA {
            return Err(Error::invalid_argument(format!(
                "the serialized CommId's backend is {backend}, not LLM_BACKEND_CPU ({}) or LLM_BACKEND_CUDA ({})",
                sys::LLM_BACKEND_CPU,
                sys::LLM_BACKEND_CUDA
            )));
        }
        if reserved != 0 {
            return Err(Error::invalid_argument(format!(
                "the serialized CommId's reserved word (bytes 4..8) is {reserved:#x}, not 0"
            )));
        }
        let mut raw = zeroed();
        raw.backend = backend;
        raw.bytes.copy_from_slice(&bytes[8..]);
        Ok(CommId { raw })
    }

    /// The backend the id was made for (`Cpu` or `Cuda`).
    pub fn backend(&self) -> Backend {
        if self.raw.backend == sys::LLM_BACKEND_CUDA {
            Backend::Cuda
        } else {
            Backend::Cpu
        }
    }

    /// The 128 opaque bytes (CPU: the MPI group tag; CUDA: NCCL's `ncclUniqueId`).
    pub fn id_bytes(&self) -> &[u8; sys::LLM_COMM_ID_BYTES] {
        &self.raw.bytes
    }

    /// The C struct, for `llm_runtime_options.comm_id`.
    pub(crate) fn raw(&self) -> &sys::llm_comm_id {
        &self.raw
    }
}

fn zeroed() -> sys::llm_comm_id {
    sys::llm_comm_id { backend: 0, reserved: 0, bytes: [0; sys::LLM_COMM_ID_BYTES] }
}

impl PartialEq for CommId {
    fn eq(&self, other: &CommId) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CommId {}

impl std::hash::Hash for CommId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for CommId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The leading bytes tell ids apart in a log; all 128 would drown it.
        let head: String = self.raw.bytes[..24].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "CommId {{ backend: {:?}, bytes: {head}.. }}", self.backend())
    }
}
