//! The spill area: Arrow IPC files that hold what a query's memory share
//! cannot.
//!
//! ```text
//!   SpillArea   <temp_directory>/stride-<pid>[-n]     one per engine; removed
//!     │                                                when created (a stale one
//!     │                                                of an earlier process) and
//!     │                                                when dropped
//!     ├─ QuerySpill   q<id>/                           one per query, made at its
//!     │    ├─ SpillFile  <n>.arrow                     first spill, removed when
//!     │    └─ SpillFile  …                             the query ends (RAII: also
//!     └─ QuerySpill   …                                on failure and cancel)
//! ```
//!
//! A file's life: [`QuerySpill::create`] opens a [`SpillWriter`]; each
//! [`SpillWriter::write`] appends one batch (an IPC message) and counts its
//! bytes; [`SpillWriter::finish`] writes the footer and hands back a
//! [`SpillFile`], which reads any batch by its index (several readers at a
//! time, each with its own file handle) and deletes the file when dropped.
//!
//! Every byte written counts three times: in the query's `spilled_bytes`
//! (reported in `stride.queries`), in the bytes the query has on disk now
//! (held against `temp_file_limit`, as PostgreSQL's), and in the area's
//! totals (`stride.memory`). A write that takes the query's files past the
//! limit fails with [`ExecError::TempFileLimit`] (SQLSTATE 53400); the
//! file is deleted with the query.
//!
//! Spilled batches, read back, are morsel-sized temporaries of the operator
//! that reads them and are not charged to the query's memory account.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;

use crate::error::{ExecError, Result};

/// Engines created by this process so far (names each one's area).
static AREAS: AtomicUsize = AtomicUsize::new(0);

/// One engine's spill directory and its totals.
#[derive(Debug)]
pub struct SpillArea {
    dir: PathBuf,
    /// `temp_file_limit` in bytes; `u64::MAX`: none (Relaxed: a setting).
    file_limit: AtomicU64,
    /// Source of query directory names (Relaxed: unique names only).
    next_query: AtomicU64,
    /// Bytes written since start, and bytes in files now (Relaxed counters).
    written: AtomicU64,
    on_disk: AtomicU64,
    /// Tests: spillable operators spill every batch (Relaxed: a setting).
    force: std::sync::atomic::AtomicBool,
}

impl SpillArea {
    /// An area in `parent` (the system's temporary directory when `None`):
    /// the directory `stride-<pid>` (`stride-<pid>-<n>` for a process's
    /// later engines), created at the first spill. What an earlier process
    /// left there under the same name — or under the name of a process that
    /// no longer runs — is removed now.
    pub fn new(parent: Option<&Path>) -> Arc<Self> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let pid = std::process::id();
        let n = AREAS.fetch_add(1, Ordering::Relaxed);
        let name = if n == 0 {
            format!("stride-{pid}")
        } else {
            format!("stride-{pid}-{n}")
        };
        let dir = parent.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        remove_stale_areas(&parent);
        Arc::new(SpillArea {
            dir,
            file_limit: AtomicU64::new(u64::MAX),
            next_query: AtomicU64::new(0),
            written: AtomicU64::new(0),
            on_disk: AtomicU64::new(0),
            force: Default::default(),
        })
    }

    /// For tests: makes sorts, aggregates and buffers spill every batch,
    /// as if every charge they ask for were refused (what cannot spill is
    /// charged as usual), so that any query exercises the spill paths.
    pub fn set_force(&self, force: bool) {
        self.force.store(force, Ordering::Relaxed);
    }

    pub fn forced(&self) -> bool {
        self.force.load(Ordering::Relaxed)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets `temp_file_limit` (bytes a query may hold in spill files;
    /// `None`: no limit) for queries started from now on.
    pub fn set_file_limit(&self, bytes: Option<u64>) {
        self.file_limit
            .store(bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn file_limit(&self) -> Option<u64> {
        Some(self.file_limit.load(Ordering::Relaxed)).filter(|&b| b != u64::MAX)
    }

    /// Bytes written to spill files since start.
    pub fn spilled_bytes(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Bytes in spill files now.
    pub fn bytes_on_disk(&self) -> u64 {
        self.on_disk.load(Ordering::Relaxed)
    }

    /// A new query's spill directory (made at its first spill).
    pub fn query(self: &Arc<Self>) -> Arc<QuerySpill> {
        let id = self.next_query.fetch_add(1, Ordering::Relaxed);
        Arc::new(QuerySpill {
            dir: self.dir.join(format!("q{id}")),
            limit: self.file_limit.load(Ordering::Relaxed),
            area: self.clone(),
            state: Mutex::new(DirState::Absent),
            next_file: AtomicU64::new(0),
            written: AtomicU64::new(0),
            on_disk: AtomicU64::new(0),
        })
    }
}

impl Drop for SpillArea {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes `stride-<pid>…` directories in `parent` whose process is gone
/// (a server that was killed leaves its area behind).
fn remove_stale_areas(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("stride-")) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let ours = entry.file_type().is_ok_and(|t| t.is_dir())
            && entry
                .path()
                .join(".stride-spill")
                .try_exists()
                .unwrap_or(false);
        if ours && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirState {
    Absent,
    Created,
    /// The query ended: no new file may be made.
    Closed,
}

/// One query's spill directory and counters.
#[derive(Debug)]
pub struct QuerySpill {
    area: Arc<SpillArea>,
    dir: PathBuf,
    /// `temp_file_limit` when the query started (`u64::MAX`: none).
    limit: u64,
    state: Mutex<DirState>,
    next_file: AtomicU64,
    /// Bytes written, and bytes in this query's files now (Relaxed).
    written: AtomicU64,
    on_disk: AtomicU64,
}

impl QuerySpill {
    /// Whether spillable operators spill every batch ([`SpillArea::set_force`]).
    pub fn forced(&self) -> bool {
        self.area.forced()
    }

    /// Bytes this query wrote to spill files.
    pub fn spilled_bytes(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Bytes in this query's spill files now.
    pub fn bytes_on_disk(&self) -> u64 {
        self.on_disk.load(Ordering::Relaxed)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens a new spill file for batches of `schema`.
    pub fn create(self: &Arc<Self>, schema: SchemaRef) -> Result<SpillWriter> {
        let path = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match *state {
                DirState::Closed => {
                    return Err(ExecError::Internal("spill after the query ended".into()))
                }
                DirState::Absent => {
                    std::fs::create_dir_all(&self.area.dir)
                        .and_then(|_| File::create(self.area.dir.join(".stride-spill")).map(|_| ()))
                        .and_then(|_| std::fs::create_dir_all(&self.dir))
                        .map_err(|e| ExecError::spill_io(&self.dir, e))?;
                    *state = DirState::Created;
                }
                DirState::Created => {}
            }
            let n = self.next_file.fetch_add(1, Ordering::Relaxed);
            self.dir.join(format!("{n}.arrow"))
        };
        let file = File::create(&path).map_err(|e| ExecError::spill_io(&path, e))?;
        let counting = CountingWriter {
            inner: BufWriter::with_capacity(256 << 10, file),
            count: 0,
        };
        let writer = FileWriter::try_new(counting, &schema)?;
        let mut w = SpillWriter {
            file: SpillFile {
                path,
                query: self.clone(),
                bytes: 0,
                rows: Vec::new(),
                readers: Mutex::default(),
            },
            schema,
            writer,
        };
        w.count()?;
        Ok(w)
    }

    /// Adds `bytes` written (and now on disk); fails once the query's files
    /// hold more than `temp_file_limit`.
    fn wrote(&self, bytes: u64) -> Result<()> {
        self.written.fetch_add(bytes, Ordering::Relaxed);
        self.area.written.fetch_add(bytes, Ordering::Relaxed);
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if *state == DirState::Closed {
            // A straggler of an ended query: its file is already unlinked.
            return Ok(());
        }
        self.area.on_disk.fetch_add(bytes, Ordering::Relaxed);
        let now = self.on_disk.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if now > self.limit {
            return Err(ExecError::TempFileLimit {
                limit_kb: self.limit / 1024,
            });
        }
        Ok(())
    }

    fn deleted(&self, bytes: u64) {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // A closed query's files were counted out when it closed.
        if *state != DirState::Closed {
            self.on_disk.fetch_sub(bytes, Ordering::Relaxed);
            self.area.on_disk.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Removes the query's directory and counts its files out; a file still
    /// open stays readable by whoever holds it (its space is freed when it
    /// is closed); no new file can be made.
    pub fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if *state == DirState::Created {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if *state != DirState::Closed {
            let held = self.on_disk.swap(0, Ordering::Relaxed);
            self.area.on_disk.fetch_sub(held, Ordering::Relaxed);
        }
        *state = DirState::Closed;
    }
}

impl Drop for QuerySpill {
    fn drop(&mut self) {
        self.close();
    }
}

/// Counts the bytes that pass through to the file.
#[derive(Debug)]
struct CountingWriter {
    inner: BufWriter<File>,
    count: u64,
}

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A spill file being written.
pub struct SpillWriter {
    file: SpillFile,
    schema: SchemaRef,
    writer: FileWriter<CountingWriter>,
}

impl std::fmt::Debug for SpillWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillWriter")
            .field("path", &self.file.path)
            .field("batches", &self.file.rows.len())
            .finish()
    }
}

impl SpillWriter {
    /// Accounts for the bytes written since the last count.
    fn count(&mut self) -> Result<()> {
        let now = self.writer.get_ref().count;
        let new = now - self.file.bytes;
        self.file.bytes = now;
        self.file.query.wrote(new)
    }

    /// Appends `batch` (relabelled to the file's schema where only names or
    /// nullability differ); returns its index in the file.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<usize> {
        let relabelled;
        let batch = if batch.schema() == self.schema {
            batch
        } else {
            relabelled = RecordBatch::try_new_with_options(
                self.schema.clone(),
                batch.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )?;
            &relabelled
        };
        self.writer.write(batch)?;
        self.file.rows.push(batch.num_rows());
        self.count()?;
        Ok(self.file.rows.len() - 1)
    }

    /// Batches written so far.
    pub fn batches(&self) -> usize {
        self.file.rows.len()
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.file.bytes
    }

    /// Writes the footer; the file can be read from now on.
    pub fn finish(mut self) -> Result<SpillFile> {
        self.writer.finish()?;
        self.writer
            .get_mut()
            .flush()
            .map_err(|e| ExecError::spill_io(&self.file.path, e))?;
        self.count()?;
        Ok(self.file)
    }
}

/// A finished spill file; deleted when dropped.
pub struct SpillFile {
    path: PathBuf,
    query: Arc<QuerySpill>,
    bytes: u64,
    /// Rows of each batch.
    rows: Vec<usize>,
    /// Idle readers, reused so that a read does not parse the footer again.
    readers: Mutex<Vec<FileReader<BufReader<File>>>>,
}

impl std::fmt::Debug for SpillFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillFile")
            .field("path", &self.path)
            .field("bytes", &self.bytes)
            .field("batches", &self.rows.len())
            .finish()
    }
}

impl SpillFile {
    pub fn batches(&self) -> usize {
        self.rows.len()
    }

    /// Rows of batch `index`.
    pub fn rows(&self, index: usize) -> usize {
        self.rows[index]
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads batch `index`.
    pub fn read(&self, index: usize) -> Result<RecordBatch> {
        let idle = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut reader = match idle {
            Some(r) => r,
            None => {
                let file =
                    File::open(&self.path).map_err(|e| ExecError::spill_io(&self.path, e))?;
                FileReader::try_new_buffered(file, None)?
            }
        };
        reader.set_index(index)?;
        let batch = reader
            .next()
            .ok_or_else(|| ExecError::Internal(format!("spill file {index} missing")))??;
        self.readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(reader);
        Ok(batch)
    }

    /// Reads the batches in order, one at a time.
    pub fn iter(&self) -> impl Iterator<Item = Result<RecordBatch>> + '_ {
        (0..self.batches()).map(|i| self.read(i))
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        self.readers
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let _ = std::fs::remove_file(&self.path);
        self.query.deleted(self.bytes);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    pub(crate) fn temp_parent(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("stride-spill-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn batch(from: i64, n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter(
                    (from..from + n).map(|i| (i % 7 != 0).then_some(i)),
                )),
                Arc::new(StringArray::from_iter_values(
                    (from..from + n).map(|i| format!("row {i}")),
                )),
            ],
        )
        .unwrap()
    }

    #[test]
    fn batches_round_trip_in_any_order_and_files_go_with_their_query() {
        let parent = temp_parent("round-trip");
        let area = SpillArea::new(Some(&parent));
        let query = area.query();
        let mut w = query.create(batch(0, 1).schema()).unwrap();
        let written: Vec<RecordBatch> = (0..5).map(|i| batch(i * 100, 10 + i)).collect();
        for (i, b) in written.iter().enumerate() {
            // A slice is written as its rows only.
            assert_eq!(w.write(&b.slice(0, b.num_rows())).unwrap(), i);
        }
        let file = w.finish().unwrap();
        assert_eq!(file.batches(), 5);
        assert_eq!(file.rows(3), 13);
        for i in [4, 0, 2, 2, 1, 3] {
            assert_eq!(file.read(i).unwrap(), written[i]);
        }
        let all: Vec<RecordBatch> = file.iter().collect::<Result<_>>().unwrap();
        assert_eq!(all, written);
        assert!(query.spilled_bytes() > 0);
        assert_eq!(query.bytes_on_disk(), file.bytes());
        assert_eq!(area.bytes_on_disk(), file.bytes());
        assert!(file.path().exists() && query.dir().exists());
        let (path, qdir) = (file.path().to_path_buf(), query.dir().to_path_buf());
        drop(file);
        assert!(!path.exists(), "a dropped file is deleted");
        assert_eq!((query.bytes_on_disk(), area.bytes_on_disk()), (0, 0));
        assert!(area.spilled_bytes() > 0, "what was written stays counted");
        // A query's directory goes with the query, whatever it left.
        let _left = query.create(batch(0, 1).schema()).unwrap();
        drop(query);
        assert!(qdir.exists(), "the writer still holds the query");
        drop(_left);
        assert!(!qdir.exists());
        let root = area.dir().to_path_buf();
        assert!(root.exists());
        drop(area);
        assert!(!root.exists(), "the area goes with its engine");
        assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0);
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_query_past_temp_file_limit_fails_with_its_own_error() {
        let parent = temp_parent("limit");
        let area = SpillArea::new(Some(&parent));
        area.set_file_limit(Some(64 << 10));
        assert_eq!(area.file_limit(), Some(64 << 10));
        let query = area.query();
        area.set_file_limit(None);
        let unlimited = area.query();
        let mut w = query.create(batch(0, 1).schema()).unwrap();
        let err = (0..100)
            .map(|i| w.write(&batch(i * 1000, 1000)))
            .find_map(|r| r.err())
            .expect("the limit is reached");
        assert!(
            matches!(err, ExecError::TempFileLimit { limit_kb: 64 }),
            "{err:?}"
        );
        assert_eq!(err.kind(), Some(crate::ErrorKind::TempFileLimit));
        assert!(err.to_string().contains("temp_file_limit"), "{err}");
        drop(w);
        // The limit is the query's at its start.
        let mut w = unlimited.create(batch(0, 1).schema()).unwrap();
        for i in 0..100 {
            w.write(&batch(i * 1000, 1000)).unwrap();
        }
        drop((w, query, unlimited, area));
        assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0);
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_killed_servers_area_is_removed_by_the_next() {
        let parent = temp_parent("stale");
        // pid 0 is never a process's; a directory without the marker is not ours.
        let stale = parent.join("stride-0");
        std::fs::create_dir_all(stale.join("q3")).unwrap();
        std::fs::write(stale.join(".stride-spill"), "").unwrap();
        let foreign = parent.join("stride-1-notes");
        std::fs::create_dir_all(&foreign).unwrap();
        let area = SpillArea::new(Some(&parent));
        assert!(!stale.exists());
        assert!(foreign.exists());
        drop(area);
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
