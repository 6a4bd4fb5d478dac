//! Morsel sequence numbers: where a batch comes from, in the order a
//! pipeline's output keeps.
//!
//! A source hands out morsels in any order to any worker, and sinks that
//! keep order (a buffer read by a later pipeline, the query's result, a
//! limit) sort what they collected by [`MorselSeq`]. Its order is the
//! lexicographic order of its parts:
//!
//! * `input` — which of several inputs feeding one sink (the branches of a
//!   UNION ALL in order; a join's probe pipeline before its build-side
//!   pass);
//! * `pass` — 0 for the rows of a pipeline's own source; `n` for the rows
//!   of the n-th pass over rows an operator deferred until its input was
//!   exhausted (a grace hash join's spilled partitions), which follow them;
//! * `position` — where in that input: the morsel's first source row, or a
//!   key range, or a block index;
//! * `chunk` — the n-th batch produced for one position (an operator that
//!   emits a morsel's output in several bounded chunks; a merge that writes
//!   a key range as several blocks).

/// A batch's place in its pipeline's output order (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MorselSeq {
    input: u32,
    pass: u32,
    position: u64,
    chunk: u32,
}

impl MorselSeq {
    /// The first batch at `position` (e.g. a morsel's first source row) of
    /// input 0.
    pub const fn at(position: u64) -> Self {
        MorselSeq {
            input: 0,
            pass: 0,
            position,
            chunk: 0,
        }
    }

    /// The same place in input `input` (the branches of a union, the
    /// passes of a join feeding one buffer).
    pub const fn in_input(self, input: u32) -> Self {
        MorselSeq { input, ..self }
    }

    /// The same place in the `pass`-th pass over deferred rows.
    pub const fn in_pass(self, pass: u32) -> Self {
        MorselSeq { pass, ..self }
    }

    /// The `chunk`-th batch produced for the same place.
    pub const fn chunk(self, chunk: u32) -> Self {
        MorselSeq { chunk, ..self }
    }

    pub const fn input(self) -> u32 {
        self.input
    }

    pub const fn pass(self) -> u32 {
        self.pass
    }

    pub const fn position(self) -> u64 {
        self.position
    }
}

impl std::fmt::Display for MorselSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pass == 0 {
            write!(f, "{}:{}.{}", self.input, self.position, self.chunk)
        } else {
            write!(
                f,
                "{}:p{}:{}.{}",
                self.input, self.pass, self.position, self.chunk
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_then_passes_then_positions_then_chunks() {
        let mut seqs = vec![
            MorselSeq::at(5).chunk(1),
            MorselSeq::at(0).in_input(1),
            MorselSeq::at(5),
            MorselSeq::at(u64::MAX),
            MorselSeq::at(7).in_input(1).chunk(3),
            MorselSeq::at(6),
            MorselSeq::at(1).in_pass(1),
        ];
        seqs.sort();
        assert_eq!(
            seqs,
            vec![
                MorselSeq::at(5),
                MorselSeq::at(5).chunk(1),
                MorselSeq::at(6),
                MorselSeq::at(u64::MAX),
                MorselSeq::at(1).in_pass(1),
                MorselSeq::at(0).in_input(1),
                MorselSeq::at(7).in_input(1).chunk(3),
            ]
        );
        assert_eq!(MorselSeq::at(9).in_input(2).to_string(), "2:9.0");
        assert_eq!(MorselSeq::at(9).in_pass(3).to_string(), "0:p3:9.0");
    }
}
