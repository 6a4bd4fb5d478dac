//! How a hash join is cut into pipelines.
//!
//! ```text
//!   build input ─► HashBuildSink                      (pipeline: build)
//!   JoinTableInsertSource ─► JoinTableInsertSink      (pipeline: link the chains)
//!   probe input ─► HashProbeOperator ─► …             (the probe pipeline goes on)
//!   with a build-side mode (outer/semi/anti kept build rows):
//!     probe pipeline ─► MaterializeSink(buffer, input 0)
//!     JoinBuildScanSource ─► MaterializeSink(buffer, input 1)
//!     buffer ─► …                                     (the next pipeline reads it)
//! ```

use std::sync::{Arc, OnceLock};

use super::{
    BuildConfig, HashBuildSink, HashProbeOperator, JoinBuildScanSource, JoinModes,
    JoinTableInsertSink, JoinTableInsertSource, KeyEncoder, SideMode,
};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::operator::materialize::MaterializeSink;
use crate::pipeline::{Compiler, Open};
use crate::plan::{BuildSide, HashJoinPlan};

/// Closes the build and insert pipelines of `j` and returns the open
/// pipeline its output continues in.
pub(crate) fn wire(c: &mut Compiler, j: &HashJoinPlan) -> Result<Open> {
    let modes = JoinModes::new(j.join_type, j.build_side)?;
    let (build, probe, build_keys, probe_keys) = match j.build_side {
        BuildSide::Left => (
            &j.left,
            &j.right,
            j.on.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>(),
            j.on.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        ),
        BuildSide::Right => (
            &j.right,
            &j.left,
            j.on.iter().map(|(_, r)| r.clone()).collect(),
            j.on.iter().map(|(l, _)| l.clone()).collect(),
        ),
    };
    let build_schema = build.schema();
    let probe_schema = probe.schema();
    let key_types = build_keys
        .iter()
        .map(|k| k.data_type(&build_schema))
        .collect::<datafusion_common::Result<Vec<_>>>()?;
    let encoder = Arc::new(KeyEncoder::new(key_types, j.null_equals_null)?);
    let slot = Arc::new(OnceLock::new());

    let build_open = c.compile_any_order(build)?;
    let build_sink = HashBuildSink::new(
        build_keys,
        encoder.clone(),
        build_schema.clone(),
        c.workers,
        BuildConfig {
            track_matches: modes.build != SideMode::None,
            partition_on_spill: !j.null_aware,
        },
        slot.clone(),
        c.memory.clone(),
    );
    c.close(build_open, Arc::new(build_sink));
    // Linking the rows into bucket chains is a pipeline of its
    // own, so that it is split into morsels like any other work.
    c.close(
        Open::new(Arc::new(JoinTableInsertSource::new(slot.clone()))),
        Arc::new(JoinTableInsertSink::new(slot.clone())),
    );

    let joined_schema = {
        let (l, r) = (j.left.schema(), j.right.schema());
        let fields: Vec<_> = l.fields().iter().chain(r.fields()).cloned().collect();
        Arc::new(arrow::datatypes::Schema::new(fields))
    };
    let mut open = c.compile(probe)?;
    open.operators.push(Arc::new(HashProbeOperator::new(
        probe_keys,
        encoder,
        slot.clone(),
        modes,
        j.build_side,
        j.filter.clone(),
        j.null_aware,
        j.schema.clone(),
        joined_schema,
        c.memory.clone(),
    )));
    Ok(if modes.build == SideMode::None {
        open
    } else {
        // The probe pipeline and the build-side pass both feed one buffer.
        let buffer = Arc::new(Buffer::new(c.memory.clone(), "join output"));
        c.close(
            open,
            Arc::new(MaterializeSink::new(
                buffer.clone(),
                0,
                "materialize join output",
            )),
        );
        let pass = Open::new(Arc::new(JoinBuildScanSource::new(
            slot,
            modes.build,
            j.build_side,
            probe_schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect(),
            j.schema.clone(),
        )));
        c.close(
            pass,
            Arc::new(MaterializeSink::new(
                buffer.clone(),
                1,
                "materialize join output",
            )),
        );
        Compiler::read(buffer, "join output")
    })
}
