//! `FileAccess`: which server-side files statements may read
//! (`CREATE EXTERNAL TABLE`, `COPY … FROM 'file'`).

use std::path::{Component, Path, PathBuf};

use crate::error::{EngineError, Result};

/// Which server-side files statements may read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FileAccess {
    /// None: file statements fail with SQLSTATE 42501 (a new engine's
    /// setting, and the server's unless it is given an import directory).
    #[default]
    Denied,
    /// Regular files under this directory only: relative locations resolve
    /// in it; `..`, absolute paths elsewhere and symbolic links that lead
    /// out are refused before the file system is asked anything.
    Under(PathBuf),
    /// Any regular file the process can read (the local command line, whose
    /// user owns the process anyway).
    Any,
}

impl FileAccess {
    /// The file a statement may read at `location`, or why not.
    pub fn resolve(&self, location: &str) -> Result<PathBuf> {
        let denied = |why: &str| {
            EngineError::InsufficientPrivilege(format!(
                "permission denied to read \"{location}\": {why}"
            ))
        };
        let path = Path::new(location);
        let resolved = match self {
            FileAccess::Denied => {
                return Err(denied(
                    "server-side files can be read only under an import directory \
                     (stride serve --import-dir DIR)",
                ))
            }
            FileAccess::Any => path.to_path_buf(),
            FileAccess::Under(dir) => {
                if path.components().any(|c| matches!(c, Component::ParentDir)) {
                    return Err(denied("the location may not contain \"..\""));
                }
                let relative = if path.is_absolute() {
                    path.strip_prefix(dir)
                        .map_err(|_| denied("the file is outside the import directory"))?
                } else {
                    path
                };
                let root = dir.canonicalize().map_err(|e| {
                    EngineError::Internal(format!("import directory {}: {e}", dir.display()))
                })?;
                let full = root.join(relative).canonicalize().map_err(|_| {
                    EngineError::UndefinedFile(format!(
                        "could not open file \"{location}\" in the import directory"
                    ))
                })?;
                if !full.starts_with(&root) {
                    return Err(denied("the file is outside the import directory"));
                }
                full
            }
        };
        match std::fs::metadata(&resolved) {
            Ok(m) if !m.is_file() => Err(EngineError::WrongObjectType(format!(
                "\"{location}\" is not a regular file"
            ))),
            // The reader reports a missing file with its path.
            _ => Ok(resolved),
        }
    }
}
