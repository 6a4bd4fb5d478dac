//! Errors of the placement layer.

use arrow::error::ArrowError;

use super::nodes::NodeSet;

/// What can go wrong placing, querying or moving memory.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// A system call failed with `errno`.
    #[error("{call} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Kernel { call: &'static str, errno: i32 },
    /// A request naming nodes this process cannot allocate on (checked
    /// before asking the kernel, which would silently drop such nodes from
    /// an interleave or bind over several).
    #[error("{call}: nodes {requested:?} are not all available (available: {available:?})")]
    NodesUnavailable {
        call: &'static str,
        requested: NodeSet,
        available: NodeSet,
    },
    /// An interleave over no node, or placements that do not fit the data.
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

    /// True when the request was refused as such — a node that does not
    /// exist or is not allowed ([`PlacementError::NodesUnavailable`],
    /// `EINVAL`, `ENODEV`, `EACCES`), a call the kernel or the sandbox does
    /// not offer (`ENOSYS`, `EPERM`) — rather than failed: the case in which
    /// [`PlacedMemory`](super::PlacedMemory) falls back to the logical
    /// record.
    pub fn is_refusal(&self) -> bool {
        const REFUSALS: [i32; 5] = [
            libc::EINVAL,
            libc::ENODEV,
            libc::EACCES,
            libc::ENOSYS,
            libc::EPERM,
        ];
        match self {
            PlacementError::Kernel { errno, .. } => REFUSALS.contains(errno),
            PlacementError::NodesUnavailable { .. } => true,
            _ => false,
        }
    }

    /// The system call the error is about, if any.
    pub fn call(&self) -> Option<&'static str> {
        match self {
            PlacementError::Kernel { call, .. } | PlacementError::NodesUnavailable { call, .. } => {
                Some(call)
            }
            _ => None,
        }
    }
}
