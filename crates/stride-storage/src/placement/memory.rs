//! Placed mappings, and Arrow data over them.
//!
//! [`PlacedMemory::map`] makes a page-aligned anonymous mapping, sets its
//! [`MemPolicy`] before any page is touched (`mbind`, or the logical record
//! where the kernel refuses), then touches every page so that each is
//! backed where the policy says.
//!
//! [`PlacedMemory::place_batch`] copies a record batch's buffers once into
//! one mapping per column (so a column takes at least a page: meant for
//! blocks of thousands of rows) and rebuilds the arrays over it with
//! [`Buffer::from_custom_allocation`]: queries then read placed memory
//! directly, with no copy per query. The arrays share the mapping through
//! an `Arc`; the last buffer dropped unmaps it.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::array::{make_array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::array::{ArrayData, ArrayDataBuilder};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::DataType;

use super::backend::{NodeBackend, PlacedMemory};
use super::error::PlacementError;
use super::nodes::{NodeId, NodeSet};
use super::psm::PageSocketMapping;

type Result<T, E = PlacementError> = std::result::Result<T, E>;

/// Where the pages of a mapping go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemPolicy {
    /// Wherever the thread that first touches a page runs (the OS default;
    /// [`PlacedMemory::map`] touches every page, so: the mapping thread's
    /// node).
    #[default]
    FirstTouch,
    /// Round-robin over the nodes, page by page (`MPOL_INTERLEAVE`).
    Interleave(NodeSet),
    /// Only on this node (`MPOL_BIND`).
    OnNode(NodeId),
    /// On this node while it has free memory, elsewhere after
    /// (`MPOL_PREFERRED`).
    Preferred(NodeId),
}

impl MemPolicy {
    /// Interleaving needs at least one node.
    pub fn validate(&self) -> Result<()> {
        match self {
            MemPolicy::Interleave(set) if set.is_empty() => Err(PlacementError::InvalidPlacement(
                "interleave over no node".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// Alignment of every buffer placed by [`PlacedMemory::place_batch`]: at
/// least what any Arrow type needs, and Arrow's own allocation alignment.
const BUFFER_ALIGN: usize = 64;

/// A page-aligned anonymous mapping made by [`PlacedMemory::map`]; unmapped
/// on drop.
#[derive(Debug)]
pub struct Mapping {
    /// Start address (kept as an integer so the mapping is `Send + Sync`).
    addr: usize,
    len: usize,
    owner: Arc<PlacedMemory>,
}

impl Mapping {
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    /// Bytes mapped (a whole number of pages).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping as bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [addr, addr + len) is mapped readable for as long as
        // `self` lives, and it is zero-filled or written, so initialised.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// The mapping as writable bytes, while nobody else holds it.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` rules out other borrows.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is a mapping this value made and owns; every
        // slice or Arrow buffer over it borrowed or owned `self`, so none
        // is left.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
        self.owner.forget(self.addr as u64, self.len as u64);
        self.owner.live_mappings.fetch_sub(1, Ordering::Relaxed);
        self.owner.live_bytes.fetch_sub(self.len, Ordering::Relaxed);
    }
}

/// A record batch whose buffers live in placed memory, with the mapping of
/// its pages to nodes.
#[derive(Debug, Clone)]
pub struct PlacedBatch {
    /// Equal to the batch that was placed.
    pub batch: RecordBatch,
    /// Where the pages of all its columns are.
    pub psm: PageSocketMapping,
    /// Where each column is.
    pub columns: Vec<PlacedColumn>,
}

/// The address ranges of one placed column, for
/// [`PageSocketMapping::subset`] and for moving its components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedColumn {
    /// The column's mapping.
    pub range: Range<u64>,
    /// For a dictionary-encoded column, its dictionary (the values), which
    /// starts on a page of its own so that it can be placed apart from the
    /// keys (the index vector, `range.start..dictionary.start`).
    pub dictionary: Option<Range<u64>>,
}

impl PlacedMemory {
    /// Maps `len` bytes (rounded up to whole pages, at least one) placed per
    /// `placement`, every page touched. A placement the kernel refuses is
    /// recorded logically (see [`PlacedMemory::fallbacks`]).
    pub fn map(self: &Arc<Self>, len: usize, placement: &MemPolicy) -> Result<Mapping> {
        placement.validate()?;
        let page = self.page_size() as usize;
        let Some(len) = len.max(1).checked_next_multiple_of(page) else {
            return Err(PlacementError::InvalidPlacement(format!(
                "cannot map {len} bytes"
            )));
        };
        // SAFETY: a fresh private anonymous mapping aliases nothing; the
        // arguments are a valid length and protection flags.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(PlacementError::last_os_error("mmap"));
        }
        self.live_mappings.fetch_add(1, Ordering::Relaxed);
        self.live_bytes.fetch_add(len, Ordering::Relaxed);
        // From here on, dropping `mapping` unmaps it.
        let mut mapping = Mapping {
            addr: addr as usize,
            len,
            owner: Arc::clone(self),
        };
        self.bind(mapping.addr(), len as u64, placement)?;
        for byte in mapping.as_mut_slice().iter_mut().step_by(page) {
            // SAFETY: `byte` is a valid, aligned reference. The write is
            // volatile so that the first touch, which places the page, is
            // not optimised away.
            unsafe { std::ptr::write_volatile(byte, 0) };
        }
        Ok(mapping)
    }

    /// Copies `batch` into placed memory, every column per `placement`.
    pub fn place_batch(
        self: &Arc<Self>,
        batch: &RecordBatch,
        placement: &MemPolicy,
    ) -> Result<PlacedBatch> {
        let placements = vec![*placement; batch.num_columns()];
        self.place_columns(batch, &placements)
    }

    /// Copies `batch` into placed memory, one mapping per column, column `i`
    /// per `placements[i]`. The copy is byte for byte: array offsets,
    /// slices, null buffers and child data (strings, lists, structs,
    /// dictionaries) stay as they are. A sliced array brings the whole
    /// buffers it refers to.
    pub fn place_columns(
        self: &Arc<Self>,
        batch: &RecordBatch,
        placements: &[MemPolicy],
    ) -> Result<PlacedBatch> {
        if placements.len() != batch.num_columns() {
            return Err(PlacementError::InvalidPlacement(format!(
                "{} placements for {} columns",
                placements.len(),
                batch.num_columns()
            )));
        }
        let mut psm = PageSocketMapping::new(self.page_size());
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
        let mut columns = Vec::with_capacity(batch.num_columns());
        for (column, placement) in batch.columns().iter().zip(placements) {
            let data = column.to_data();
            let layout = Layout::of(&data, self.page_size() as usize);
            let mut mapping = self.map(layout.len, placement)?;
            layout.copy(&data, mapping.as_mut_slice());
            let mapping = Arc::new(mapping);
            let placed = rebuild(&data, &mapping, &mut layout.buffers.into_iter());
            // SAFETY: `placed` has the data type, lengths, offsets and
            // null counts of `data`, and buffers holding byte-identical
            // copies of `data`'s, aligned to 64 bytes; `data` is valid, so
            // `placed` is.
            let placed = unsafe { placed.build_unchecked() };
            let range = mapping.addr()..mapping.addr() + mapping.len() as u64;
            psm.add(range.start, mapping.len() as u64, self.as_ref())?;
            columns.push(PlacedColumn {
                dictionary: layout
                    .dictionary
                    .map(|start| range.start + start as u64..range.end),
                range,
            });
            arrays.push(make_array(placed));
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let batch = RecordBatch::try_new_with_options(batch.schema(), arrays, &options)?;
        Ok(PlacedBatch {
            batch,
            psm,
            columns,
        })
    }
}

/// What [`visit_buffers`] shows of an array.
enum Piece<'a> {
    /// A buffer's bytes.
    Bytes(&'a [u8]),
    /// The dictionary of a dictionary-encoded column follows: it starts on
    /// a fresh page.
    Dictionary,
}

/// The buffers of an array in the order [`Layout`] and [`rebuild`] walk
/// them: data buffers, the null bitmap, then each child likewise; for a
/// dictionary-encoded column (`top`), a [`Piece::Dictionary`] mark before
/// its values.
fn visit_buffers<'a>(data: &'a ArrayData, top: bool, f: &mut impl FnMut(Piece<'a>)) {
    for buffer in data.buffers() {
        f(Piece::Bytes(buffer.as_slice()));
    }
    if let Some(nulls) = data.nulls() {
        f(Piece::Bytes(nulls.buffer().as_slice()));
    }
    if top && matches!(data.data_type(), DataType::Dictionary(..)) {
        f(Piece::Dictionary);
    }
    for child in data.child_data() {
        visit_buffers(child, false, f);
    }
}

/// Where a column's buffers go in its mapping: each aligned to
/// [`BUFFER_ALIGN`], a dictionary on a page boundary.
struct Layout {
    /// Per buffer, in [`visit_buffers`] order.
    buffers: Vec<Range<usize>>,
    /// Where the dictionary starts, for a dictionary-encoded column.
    dictionary: Option<usize>,
    /// Bytes in all.
    len: usize,
}

impl Layout {
    fn of(data: &ArrayData, page_size: usize) -> Layout {
        let mut layout = Layout {
            buffers: Vec::new(),
            dictionary: None,
            len: 0,
        };
        visit_buffers(data, true, &mut |piece| match piece {
            Piece::Bytes(bytes) => {
                let start = layout.len.next_multiple_of(BUFFER_ALIGN);
                layout.len = start + bytes.len();
                layout.buffers.push(start..layout.len);
            }
            Piece::Dictionary => {
                layout.len = layout.len.next_multiple_of(page_size);
                layout.dictionary = Some(layout.len);
            }
        });
        layout
    }

    /// Copies `data`'s buffers to their places in `dest` (at least
    /// `self.len` bytes).
    fn copy(&self, data: &ArrayData, dest: &mut [u8]) {
        let mut places = self.buffers.iter();
        visit_buffers(data, true, &mut |piece| {
            if let Piece::Bytes(bytes) = piece {
                let place = places.next().expect("a place per buffer");
                dest[place.clone()].copy_from_slice(bytes);
            }
        });
    }
}

/// `data`'s builder over the copies in `mapping` (`layout`: the places of
/// its buffers, in [`visit_buffers`] order).
fn rebuild(
    data: &ArrayData,
    mapping: &Arc<Mapping>,
    layout: &mut impl Iterator<Item = Range<usize>>,
) -> ArrayDataBuilder {
    let mut next = || {
        let range = layout.next().expect("one placed range per buffer");
        let base = mapping.addr as *mut u8;
        // SAFETY: `range` lies inside the mapping (`Layout::copy` wrote it),
        // so the pointer is non-null and valid for `range.len()` bytes for
        // as long as the owner Arc keeps the mapping alive; nothing writes
        // to it any more.
        unsafe {
            Buffer::from_custom_allocation(
                NonNull::new_unchecked(base.add(range.start)),
                range.len(),
                Arc::clone(mapping) as Arc<dyn arrow::alloc::Allocation>,
            )
        }
    };
    let buffers: Vec<Buffer> = data.buffers().iter().map(|_| next()).collect();
    let nulls = data.nulls().map(|n| {
        let bits = BooleanBuffer::new(next(), n.offset(), n.len());
        // SAFETY: the same bits as `n`, so the same null count.
        unsafe { NullBuffer::new_unchecked(bits, n.null_count()) }
    });
    let children: Vec<ArrayData> = data
        .child_data()
        .iter()
        // SAFETY: as for the parent in `place_columns`: a byte-identical
        // copy of a valid child.
        .map(|c| unsafe { rebuild(c, mapping, layout).build_unchecked() })
        .collect();
    ArrayData::builder(data.data_type().clone())
        .len(data.len())
        .offset(data.offset())
        .buffers(buffers)
        .nulls(nulls)
        .child_data(children)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::backend::{Backing, PlacedMemoryConfig};
    use arrow::array::{
        Array, BooleanArray, DictionaryArray, Int32Array, Int64Array, ListArray, StringArray,
        StructArray,
    };
    use arrow::datatypes::{Field, Int16Type, Int32Type, Int8Type, Schema};

    fn placer(backing: Backing) -> Arc<PlacedMemory> {
        Arc::new(PlacedMemory::new(PlacedMemoryConfig { backing }))
    }

    /// Strings, nulls, a list, a struct and a dictionary; 1000 rows.
    fn sample_batch() -> RecordBatch {
        let n = 1000;
        let ints = Int64Array::from_iter((0..n).map(|i| (i % 7 != 0).then_some(i * 3)));
        let strings = StringArray::from_iter(
            (0..n)
                .map(|i| (i % 5 != 0).then(|| format!("row {i} {}", "x".repeat(i as usize % 13)))),
        );
        let list =
            ListArray::from_iter_primitive::<Int32Type, _, _>((0..n).map(|i| {
                (i % 3 != 0).then(|| (0..i % 4).map(|j| Some(j as i32)).collect::<Vec<_>>())
            }));
        let inner = Arc::new(Int32Array::from_iter_values((0..n).map(|i| i as i32)));
        let structs = StructArray::from(vec![(
            Arc::new(Field::new("a", DataType::Int32, false)),
            inner as ArrayRef,
        )]);
        let dict: DictionaryArray<Int8Type> = (0..n)
            .map(|i| ["red", "green", "blue"][i as usize % 3])
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(ints),
            Arc::new(strings),
            Arc::new(list),
            Arc::new(structs),
            Arc::new(dict),
        ];
        let fields: Vec<Field> = ["i", "s", "l", "st", "d"]
            .iter()
            .zip(&columns)
            .map(|(name, c)| Field::new(*name, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// Places [`sample_batch`] and checks that the copy equals it.
    fn place_sample(placement: MemPolicy) -> (Arc<PlacedMemory>, PlacedBatch) {
        let placer = placer(Backing::KernelThenFake);
        let placed = placer.place_batch(&sample_batch(), &placement).unwrap();
        assert_eq!(placed.batch, sample_batch());
        (placer, placed)
    }

    #[test]
    fn placed_batch_equals_the_original_and_lives_in_its_mappings() {
        let (placer, placed) = place_sample(MemPolicy::FirstTouch);
        for (column, PlacedColumn { range, .. }) in
            placed.batch.columns().iter().zip(&placed.columns)
        {
            let data = column.to_data();
            data.validate_full().unwrap();
            for buffer in data.buffers() {
                let p = buffer.as_ptr() as u64;
                assert!(range.contains(&p) || buffer.is_empty(), "{p:#x} {range:x?}");
                assert_eq!(p % BUFFER_ALIGN as u64, 0);
            }
        }
        // First touch is real here: every page reported by the kernel (or
        // logically, where a sandbox forbids move_pages, not at all).
        let pages: u64 = placed
            .columns
            .iter()
            .map(|c| (c.range.end - c.range.start) / placer.page_size())
            .sum();
        assert!(placed.psm.total_pages() == pages || placer.fallbacks().count > 0);
    }

    #[test]
    fn sliced_arrays_keep_their_offsets() {
        let placer = placer(Backing::Fake);
        let batch = sample_batch().slice(37, 500);
        // And an array whose ArrayData itself carries an offset (booleans
        // keep a bit offset).
        let bools = BooleanArray::from_iter((0..600).map(|i| (i % 3 != 0).then_some(i % 2 == 0)));
        let data = bools.slice(3, 500).to_data();
        let batch = RecordBatch::try_from_iter(
            batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .zip(batch.columns().iter().cloned())
                .chain([("o".to_string(), make_array(data))]),
        )
        .unwrap();
        assert_eq!(batch.column(5).to_data().offset(), 3);
        let placed = placer
            .place_batch(&batch, &MemPolicy::Interleave(NodeSet::first(2)))
            .unwrap();
        assert_eq!(placed.batch, batch);
        assert_eq!(placed.batch.slice(100, 7), batch.slice(100, 7));
    }

    #[test]
    fn dropping_the_last_array_unmaps() {
        let (placer, placed) = place_sample(MemPolicy::FirstTouch);
        assert_eq!(placer.usage().mappings, placed.batch.num_columns());
        let column = placed.batch.column(1).clone();
        drop(placed);
        assert_eq!(
            placer.usage().mappings,
            1,
            "the kept column holds its mapping"
        );
        assert!(column.to_data().validate_full().is_ok());
        drop(column);
        assert_eq!(placer.usage(), Default::default());
    }

    #[test]
    fn on_node_one_falls_back_to_a_logical_node_on_a_one_node_machine() {
        let (placer, placed) = place_sample(MemPolicy::OnNode(1));
        if !machine_has_node_1() {
            let report = placer.fallbacks();
            assert_eq!(report.count, placed.batch.num_columns() as u64);
            assert_eq!(report.first.unwrap().call, "mbind");
        }
        assert_eq!(placed.psm.majority_node(), Some(1));
        assert_eq!(placed.psm.pages_on(1), placed.psm.total_pages());
        let first = placed.columns[0].range.start;
        assert_eq!(placed.psm.lookup(first), Some(1));
        drop(placed);
        assert_eq!(placer.usage(), Default::default());
    }

    fn machine_has_node_1() -> bool {
        std::path::Path::new("/sys/devices/system/node/node1").exists()
    }

    #[test]
    fn interleaving_over_a_missing_node_is_recorded_as_a_pattern() {
        let placer = placer(Backing::KernelThenFake);
        let page = placer.page_size();
        let nodes = NodeSet::of([0, 1]);
        let mapping = placer
            .map(64 * page as usize, &MemPolicy::Interleave(nodes))
            .unwrap();
        let mut psm = PageSocketMapping::new(page);
        psm.add(mapping.addr(), mapping.len() as u64, placer.as_ref())
            .unwrap();
        if !machine_has_node_1() {
            assert_eq!(placer.fallbacks().count, 1);
        }
        assert_eq!(psm.ranges().len(), 1);
        assert_eq!(psm.ranges()[0].interleave, Some(nodes));
        assert_eq!((psm.pages_on(0), psm.pages_on(1)), (32, 32));
    }

    #[test]
    fn moving_pages_to_a_missing_node_and_back() {
        let placer = placer(Backing::KernelThenFake);
        let page = placer.page_size();
        let mapping = placer
            .map(8 * page as usize, &MemPolicy::FirstTouch)
            .unwrap();
        let (addr, len) = (mapping.addr(), mapping.len() as u64);
        let mut psm = PageSocketMapping::new(page);
        psm.add(addr, len, placer.as_ref()).unwrap();
        // Where this thread touched them (node 0 where a sandbox hides it).
        let home = psm.lookup(addr).unwrap_or(0);
        // No machine Stride runs on has node 255: recorded logically.
        psm.move_range(addr, 4 * page, 255, placer.as_ref())
            .unwrap();
        assert_eq!(psm.lookup(addr + 3 * page), Some(255));
        assert_eq!(psm.pages_on(255), 4);
        assert_eq!(placer.fallbacks().first.unwrap().call, "move_pages");
        // Back home for real: the logical record is dropped.
        psm.move_range(addr, len, home, placer.as_ref()).unwrap();
        assert_eq!(psm.pages_on(home), 8);
        assert_eq!(psm.ranges().len(), 1);
    }

    /// Seed 002's IVP on one column: the index vector moved, the dictionary
    /// interleaved, page by page, under the arrays that read them.
    #[test]
    fn a_dictionary_sits_on_its_own_pages_and_moves_apart_from_its_keys() {
        let placer = placer(Backing::Fake);
        let page = placer.page_size();
        let values: Vec<String> = (0..4000).map(|i| format!("value {i:05}")).collect();
        let dict: DictionaryArray<Int16Type> = (0..30_000)
            .map(|i| values[(i * 7919) % values.len()].as_str())
            .collect();
        let batch = RecordBatch::try_from_iter([("d", Arc::new(dict) as ArrayRef)]).unwrap();
        let mut placed = placer.place_batch(&batch, &MemPolicy::OnNode(0)).unwrap();
        let column = placed.columns[0].clone();
        let dictionary = column.dictionary.clone().unwrap();
        assert_eq!(dictionary.start % page, 0);
        let keys = column.range.start..dictionary.start;
        assert!(keys.end - keys.start >= 30_000 * 2);
        let values_buffer = placed.batch.column(0).to_data().child_data()[0].buffers()[1].as_ptr();
        assert!(dictionary.contains(&(values_buffer as u64)));

        let psm = &mut placed.psm;
        psm.move_range(keys.start, keys.end - keys.start, 2, placer.as_ref())
            .unwrap();
        let all = NodeSet::first(4);
        psm.interleave_range(
            dictionary.start,
            dictionary.end - dictionary.start,
            &all,
            placer.as_ref(),
        )
        .unwrap();
        assert_eq!(
            psm.subset(keys.start, keys.end - keys.start)
                .majority_node(),
            Some(2)
        );
        let dict_psm = psm.subset(dictionary.start, dictionary.end - dictionary.start);
        assert_eq!(dict_psm.ranges().len(), 1);
        assert_eq!(dict_psm.ranges()[0].interleave, Some(all));
        // Pages moved, not data: the arrays are the same ones, still equal.
        assert_eq!(placed.batch, batch);
    }

    #[test]
    fn a_fake_topology_places_columns_per_node() {
        let placer = placer(Backing::Fake);
        let batch = sample_batch();
        let placements: Vec<MemPolicy> = (0..batch.num_columns())
            .map(|i| MemPolicy::OnNode(i as NodeId))
            .collect();
        let placed = placer.place_columns(&batch, &placements).unwrap();
        for (i, PlacedColumn { range, .. }) in placed.columns.iter().enumerate() {
            let part = placed.psm.subset(range.start, range.end - range.start);
            assert_eq!(part.majority_node(), Some(i as NodeId));
        }
        assert!(placer.place_columns(&batch, &placements[1..]).is_err());
        assert_eq!(placer.fallbacks().count, 0);
    }
}
