//! Hashing of join and group keys.

/// Hash of a 64-bit integer key (multiply-xorshift; good enough spread for
/// power-of-two tables).
#[inline]
pub fn hash_u64(x: u64) -> u64 {
    let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 29)
}

/// Hash of a byte string (encoded multi-column key).
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ v).wrapping_mul(0x1000_0000_01b3).rotate_left(23);
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x1000_0000_01b3);
    }
    hash_u64(h)
}

/// Key types that are hashed and compared as a widened `i64`.
pub fn is_int_like(t: &arrow::datatypes::DataType) -> bool {
    use arrow::datatypes::DataType::*;
    matches!(
        t,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | Date32 | Date64
    )
}

/// Makes equal floating-point keys bit-identical: `-0.0 + 0.0` is `+0.0`, so
/// 0.0 and -0.0 hash, join and group as one value (SQL equality), while the
/// encoded bytes of every other value stay the same.
pub fn normalize_float_key(
    column: arrow::array::ArrayRef,
) -> Result<arrow::array::ArrayRef, arrow::error::ArrowError> {
    use arrow::array::{Float32Array, Float64Array};
    use arrow::compute::kernels::numeric::add;
    use arrow::datatypes::DataType;
    match column.data_type() {
        DataType::Float64 => add(&column, &Float64Array::new_scalar(0.0)),
        DataType::Float32 => add(&column, &Float32Array::new_scalar(0.0)),
        _ => Ok(column),
    }
}

/// Asks the CPU to bring the cache line of `p` into cache, without waiting
/// for it: a lookup that follows a little later then finds it there. A
/// hint only; any address is allowed (no other architecture prefetches).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has (it
        // is part of the architecture's baseline), and a prefetch does not
        // access memory architecturally: it never faults, whatever `p` is.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
