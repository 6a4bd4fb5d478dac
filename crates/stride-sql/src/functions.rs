//! Function overrides: the string builders whose output size the caller
//! chooses (`repeat`, `lpad`, `rpad`) refuse, before building it, any value
//! larger than PostgreSQL's limit on one value ([`MAX_VALUE_BYTES`], 1 GB)
//! with SQLSTATE 54000, as PostgreSQL does ("requested length too large").
//! Without this, `repeat('x', 2000000000)` builds a 2 GB string per row
//! (DataFusion's own bound is the 2 GB of a string array).
//!
//! Each override wraps DataFusion's implementation and delegates everything
//! but the size check to it.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::compute::cast;
use arrow::compute::kernels::length::length;
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion_common::{DataFusionError, Result};
use datafusion_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature,
};
use stride_exec::ExecError;

/// The largest value a function may build, in bytes (PostgreSQL's
/// `MaxAllocSize`, 1 GB).
pub const MAX_VALUE_BYTES: usize = (1 << 30) - 1;

/// Bytes one character may take in UTF-8: a padded result of `n` characters
/// may need `n` times this.
const MAX_CHAR_BYTES: u128 = 4;

/// How an overridden function's arguments determine its result's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Size {
    /// `repeat(s, n)`: `octet_length(s) · n` bytes.
    Repeat,
    /// `lpad(s, n [, fill])`, `rpad(…)`: `n` characters.
    Pad,
}

/// Replaces DataFusion's `repeat`, `lpad` and `rpad` in `scalars` (every
/// name they are registered under) with size-checked versions.
pub fn limit_value_sizes(scalars: &mut std::collections::HashMap<String, Arc<ScalarUDF>>) {
    for (name, size) in [
        ("repeat", Size::Repeat),
        ("lpad", Size::Pad),
        ("rpad", Size::Pad),
    ] {
        let Some(inner) = scalars.get(name).cloned() else {
            continue;
        };
        let checked = Arc::new(ScalarUDF::new_from_impl(SizeChecked { inner, size }));
        for alias in checked.aliases().iter().chain([&name.to_string()]) {
            scalars.insert(alias.clone(), checked.clone());
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SizeChecked {
    inner: Arc<ScalarUDF>,
    size: Size,
}

impl SizeChecked {
    /// The largest result, in bytes, that any row asks for (rows with a
    /// NULL argument ask for nothing).
    fn largest_request(&self, args: &[ColumnarValue]) -> Result<u128> {
        let array = |v: &ColumnarValue| -> Result<ArrayRef> {
            match v {
                ColumnarValue::Array(a) => Ok(a.clone()),
                ColumnarValue::Scalar(s) => s.to_array_of_size(1),
            }
        };
        let Some(count) = args.get(1) else {
            return Ok(0);
        };
        let count = cast(&array(count)?, &DataType::Int64)?;
        let count = count.as_primitive::<Int64Type>();
        let octets = match self.size {
            Size::Repeat => Some(cast(&length(&array(&args[0])?)?, &DataType::Int64)?),
            Size::Pad => None,
        };
        let octets = octets.as_ref().map(|o| o.as_primitive::<Int64Type>());
        let rows = count.len().max(octets.map_or(1, |o| o.len()));
        // A one-row array stands for a scalar argument: it applies to every row.
        let value = |a: &PrimitiveArray<Int64Type>, row: usize| {
            let i = if a.len() == 1 { 0 } else { row };
            a.is_valid(i).then(|| a.value(i).max(0) as u128)
        };
        let mut largest = 0;
        for row in 0..rows {
            let unit = match octets {
                Some(o) => value(o, row),
                None => Some(MAX_CHAR_BYTES),
            };
            if let (Some(n), Some(unit)) = (value(count, row), unit) {
                largest = largest.max(n * unit);
            }
        }
        Ok(largest)
    }
}

impl ScalarUDFImpl for SizeChecked {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let requested = self.largest_request(&args.args)?;
        if requested > MAX_VALUE_BYTES as u128 {
            return Err(DataFusionError::External(Box::new(
                ExecError::ValueTooLarge {
                    function: self.inner.name().to_string(),
                    requested: usize::try_from(requested).unwrap_or(usize::MAX),
                    limit: MAX_VALUE_BYTES,
                },
            )));
        }
        self.inner.invoke_with_args(args)
    }
}
