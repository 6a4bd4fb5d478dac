//! Errors of the placement layer.

use arrow::error::ArrowError;

/// What can go wrong placing, querying or moving memory.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// A system call failed with `errno`.
    #[error("{call} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Kernel { call: &'static str, errno: i32 },
    /// A node outside `0..MAX_NODES`, or an interleave over no node.
    #[error("invalid placement: {0}")]
    InvalidPlacement(String),
    /// Two page-socket mappings over different page sizes cannot be combined.
    #[error("page sizes differ: {0} and {1} bytes")]
    PageSizeMismatch(u64, u64),
    #[error("Arrow error: {0}")]
    Arrow(#[from] ArrowError),
}

impl PlacementError {
    /// The error of the system call `call` that just failed (reads `errno`).
    pub(crate) fn last_os_error(call: &'static str) -> Self {
        PlacementError::Kernel {
            call,
            errno: std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        }
    }

    /// True when the kernel refused the request as such — a node that does
    /// not exist or is not allowed (`EINVAL`, `ENODEV`), a call the kernel
    /// or the sandbox does not offer (`ENOSYS`, `EPERM`) — rather than
    /// failing it: the case in which [`PlacedMemory`](super::PlacedMemory)
    /// falls back to the logical record.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            PlacementError::Kernel { errno, .. }
                if [libc::EINVAL, libc::ENODEV, libc::ENOSYS, libc::EPERM].contains(errno)
        )
    }
}
