//! Declared keys (`PRIMARY KEY`, `UNIQUE`), character lengths
//! (`varchar(n)`) and column defaults of a table, and the enforcement of
//! keys and lengths on every write.
//!
//! All live in the table's Arrow schema: a key as schema metadata
//! (`stride.key.<i>` = `"p 0,2 name"` — kind, column indices, name), a
//! length and a default as field metadata (`stride.max_chars`,
//! `stride.default`). So they persist with the
//! table (the log and checkpoints write the schema as it is) and every
//! snapshot of the table carries them.
//!
//! Enforcement, as PostgreSQL's:
//! * a key's values are unique among the table's rows; a row with a NULL
//!   in any of the key's columns never conflicts (NULLs are distinct), and
//!   a primary key's columns are `NOT NULL` (the DDL makes them so);
//! * a string longer than its column's length is an error (22001), counted
//!   in characters.
//!
//! [`KeyIndex`] holds one key's values present in a snapshot, as
//! byte-comparable rows (`arrow::row`), in levels as a log-structured merge
//! keeps them: an append adds a level of its own rows and merges the
//! smaller levels into the ones before them while a level is at least half
//! of its predecessor. A snapshot shares its predecessor's levels, so a
//! table written a row at a time costs O(log n) per row, not a copy of the
//! index per statement. The index lives only in memory: it is built from
//! the rows on a snapshot's first write check.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::error::{Result, StorageError};

/// Schema metadata key prefix of a declared key.
const KEY_PREFIX: &str = "stride.key.";
/// Field metadata key of a string column's maximum length in characters.
pub const MAX_CHARS: &str = "stride.max_chars";
/// Field metadata key of a column's `DEFAULT` expression, as SQL text
/// (the SQL layer plans it into every `INSERT` that leaves the column out).
pub const DEFAULT: &str = "stride.default";

/// A `PRIMARY KEY` or `UNIQUE` constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyConstraint {
    /// The constraint's name (PostgreSQL's default: `t_pkey`, `t_a_b_key`).
    pub name: String,
    /// `PRIMARY KEY` (else `UNIQUE`).
    pub primary: bool,
    /// The key's columns, as indices into the table's columns, in the
    /// declared order.
    pub columns: Vec<usize>,
}

/// The keys declared on a table with `schema`, in declaration order.
pub fn keys(schema: &Schema) -> Vec<KeyConstraint> {
    let mut found: Vec<(usize, KeyConstraint)> = schema
        .metadata()
        .iter()
        .filter_map(|(k, v)| {
            let i = k.strip_prefix(KEY_PREFIX)?.parse().ok()?;
            let (kind, rest) = v.split_once(' ')?;
            let (columns, name) = rest.split_once(' ')?;
            let columns = columns
                .split(',')
                .map(|c| c.parse().ok())
                .collect::<Option<Vec<usize>>>()?;
            Some((
                i,
                KeyConstraint {
                    name: name.to_string(),
                    primary: kind == "p",
                    columns,
                },
            ))
        })
        .collect();
    found.sort_by_key(|(i, _)| *i);
    found.into_iter().map(|(_, k)| k).collect()
}

/// `schema` with `keys` declared (replacing any declared before). Every
/// key must name at least one column of `schema`.
pub fn with_keys(schema: Schema, keys: &[KeyConstraint]) -> Result<Schema> {
    let mut metadata = schema.metadata().clone();
    metadata.retain(|k, _| !k.starts_with(KEY_PREFIX));
    for (i, key) in keys.iter().enumerate() {
        if key.columns.is_empty() || key.columns.iter().any(|&c| c >= schema.fields().len()) {
            return Err(StorageError::Internal(format!(
                "key {} names no column or a column the table lacks",
                key.name
            )));
        }
        let columns: Vec<String> = key.columns.iter().map(usize::to_string).collect();
        let kind = if key.primary { "p" } else { "u" };
        metadata.insert(
            format!("{KEY_PREFIX}{i}"),
            format!("{kind} {} {}", columns.join(","), key.name),
        );
    }
    Ok(schema.with_metadata(metadata))
}

/// The schema of a table made from a query's rows (`CREATE TABLE … AS`):
/// a query's result keeps its inputs' metadata, but keys and defaults are
/// its source tables', not the new table's, so both are dropped. Lengths
/// stay, as PostgreSQL keeps `varchar(n)` of a column selected as it is.
pub fn derived(schema: &Schema) -> Schema {
    let mut metadata = schema.metadata().clone();
    metadata.retain(|k, _| !k.starts_with(KEY_PREFIX));
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut m = f.metadata().clone();
            m.remove(DEFAULT);
            f.as_ref().clone().with_metadata(m)
        })
        .collect();
    Schema::new_with_metadata(fields, metadata)
}

/// The maximum length in characters of a string column (`varchar(n)`).
pub fn max_chars(field: &Field) -> Option<usize> {
    field.metadata().get(MAX_CHARS)?.parse().ok()
}

/// `field` limited to `n` characters.
pub fn with_max_chars(field: Field, n: usize) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.insert(MAX_CHARS.to_string(), n.to_string());
    field.with_metadata(metadata)
}

/// A column's `DEFAULT` expression as SQL text.
pub fn default_text(field: &Field) -> Option<&str> {
    field.metadata().get(DEFAULT).map(String::as_str)
}

/// `field` with `DEFAULT` expression `sql`.
pub fn with_default(field: Field, sql: &str) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.insert(DEFAULT.to_string(), sql.to_string());
    field.with_metadata(metadata)
}

/// Checks the strings of `column` against `field`'s length, if it has one.
pub(crate) fn check_length(field: &Field, column: &dyn Array) -> Result<()> {
    let Some(limit) = max_chars(field) else {
        return Ok(());
    };
    let too_long = |s: &str| s.len() > limit && s.chars().count() > limit;
    let found = match column.data_type() {
        DataType::Utf8 => column.as_string::<i32>().iter().flatten().any(too_long),
        DataType::LargeUtf8 => column.as_string::<i64>().iter().flatten().any(too_long),
        DataType::Utf8View => column.as_string_view().iter().flatten().any(too_long),
        _ => false,
    };
    if found {
        return Err(StorageError::StringTooLong(format!(
            "character varying({limit})"
        )));
    }
    Ok(())
}

/// One key's values present in a snapshot (see the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyIndex {
    /// Sets of encoded key values, larger (older) first; disjoint.
    levels: Vec<Arc<HashSet<Box<[u8]>>>>,
}

impl KeyIndex {
    fn contains(&self, key: &[u8]) -> bool {
        self.levels.iter().any(|l| l.contains(key))
    }

    /// This index with `level` added, merged as the module docs say.
    fn with_level(&self, level: HashSet<Box<[u8]>>) -> KeyIndex {
        let mut levels = self.levels.clone();
        if level.is_empty() {
            return KeyIndex { levels };
        }
        levels.push(Arc::new(level));
        while levels.len() >= 2
            && levels[levels.len() - 1].len() * 2 >= levels[levels.len() - 2].len()
        {
            let (Some(last), Some(before)) = (levels.pop(), levels.pop()) else {
                break;
            };
            let mut merged = Arc::unwrap_or_clone(before);
            merged.extend(Arc::unwrap_or_clone(last));
            levels.push(Arc::new(merged));
        }
        KeyIndex { levels }
    }
}

/// The indices of `keys` over `base` (built from `base_blocks` when
/// `base` is `None`) extended by `more`'s rows, or the first violation:
/// a value of `more` already present, or present twice in `more`.
pub(crate) fn extend_indexes(
    table: &str,
    schema: &SchemaRef,
    keys: &[KeyConstraint],
    base: Option<&[KeyIndex]>,
    more: &[RecordBatch],
) -> Result<Vec<KeyIndex>> {
    let mut out = Vec::with_capacity(keys.len());
    for (k, key) in keys.iter().enumerate() {
        let before = base.and_then(|b| b.get(k)).cloned().unwrap_or_default();
        let fields: Vec<SortField> = key
            .columns
            .iter()
            .map(|&c| SortField::new(schema.field(c).data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let mut level: HashSet<Box<[u8]>> = HashSet::new();
        for batch in more {
            let columns: Vec<_> = key
                .columns
                .iter()
                .map(|&c| batch.column(c).clone())
                .collect();
            let rows = converter.convert_columns(&columns)?;
            for i in 0..batch.num_rows() {
                if columns.iter().any(|c| c.is_null(i)) {
                    continue;
                }
                let value = rows.row(i);
                let bytes = value.as_ref();
                if before.contains(bytes) || !level.insert(bytes.into()) {
                    return Err(violation(table, schema, key, &columns, i));
                }
            }
        }
        out.push(before.with_level(level));
    }
    Ok(out)
}

/// 23505 for the key value of row `row` of `columns`.
fn violation(
    table: &str,
    schema: &SchemaRef,
    key: &KeyConstraint,
    columns: &[arrow::array::ArrayRef],
    row: usize,
) -> StorageError {
    let names: Vec<&str> = key
        .columns
        .iter()
        .map(|&c| schema.field(c).name().as_str())
        .collect();
    let options = FormatOptions::default();
    let values: Vec<String> = columns
        .iter()
        .map(|c| {
            ArrayFormatter::try_new(c.as_ref(), &options)
                .map(|f| f.value(row).to_string())
                .unwrap_or_default()
        })
        .collect();
    StorageError::UniqueViolation {
        constraint: key.name.clone(),
        table: table.to_string(),
        detail: format!(
            "Key ({})=({}) already exists.",
            names.join(", "),
            values.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};

    fn schema() -> SchemaRef {
        let s = Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            with_max_chars(Field::new("b", DataType::Utf8, true), 3),
        ]);
        let keys = [
            KeyConstraint {
                name: "t_pkey".into(),
                primary: true,
                columns: vec![0],
            },
            KeyConstraint {
                name: "t a b key".into(),
                primary: false,
                columns: vec![0, 1],
            },
        ];
        Arc::new(with_keys(s, &keys).unwrap())
    }

    fn batch(schema: &SchemaRef, a: &[i32], b: &[Option<&str>]) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(a.to_vec())),
                Arc::new(StringArray::from(b.to_vec())),
            ],
        )
        .unwrap()
    }

    #[test]
    fn keys_and_lengths_round_trip_through_the_schema() {
        let s = schema();
        let k = keys(&s);
        assert_eq!(k.len(), 2);
        assert!(k[0].primary && k[0].columns == [0] && k[0].name == "t_pkey");
        assert!(!k[1].primary && k[1].columns == [0, 1] && k[1].name == "t a b key");
        assert_eq!(max_chars(s.field(1)), Some(3));
        assert_eq!(max_chars(s.field(0)), None);
        // Replacing keys drops the old ones.
        let plain = with_keys(s.as_ref().clone(), &[]).unwrap();
        assert!(keys(&plain).is_empty());
        assert!(with_keys(
            plain,
            &[KeyConstraint {
                name: "x".into(),
                primary: false,
                columns: vec![5],
            }]
        )
        .is_err());
    }

    #[test]
    fn a_value_present_before_or_twice_in_the_new_rows_is_a_violation() {
        let s = schema();
        let k = &keys(&s)[..1];
        let first = extend_indexes("t", &s, k, None, &[batch(&s, &[1, 2], &[None, None])]).unwrap();
        let err = extend_indexes(
            "t",
            &s,
            k,
            Some(&first),
            &[batch(&s, &[3, 2], &[None, None])],
        )
        .unwrap_err();
        match err {
            StorageError::UniqueViolation {
                constraint, detail, ..
            } => {
                assert_eq!(constraint, "t_pkey");
                assert_eq!(detail, "Key (a)=(2) already exists.");
            }
            other => panic!("{other}"),
        }
        assert!(extend_indexes("t", &s, k, None, &[batch(&s, &[4, 4], &[None, None])]).is_err());
        assert!(extend_indexes(
            "t",
            &s,
            k,
            Some(&first),
            &[batch(&s, &[3, 4], &[None, None])]
        )
        .is_ok());
    }

    #[test]
    fn rows_with_a_null_in_the_key_never_conflict() {
        let s = schema();
        let k = &keys(&s)[1..];
        let b = batch(&s, &[1, 1, 1], &[None, None, Some("x")]);
        let idx = extend_indexes("t", &s, k, None, &[b]).unwrap();
        assert!(extend_indexes("t", &s, k, Some(&idx), &[batch(&s, &[1], &[None])]).is_ok());
        assert!(extend_indexes("t", &s, k, Some(&idx), &[batch(&s, &[1], &[Some("x")])]).is_err());
    }

    #[test]
    fn levels_merge_so_that_a_table_written_row_by_row_keeps_few() {
        let s = schema();
        let k = &keys(&s)[..1];
        let mut idx: Vec<KeyIndex> = extend_indexes("t", &s, k, None, &[]).unwrap();
        for i in 0..1000 {
            idx = extend_indexes("t", &s, k, Some(&idx), &[batch(&s, &[i], &[None])]).unwrap();
        }
        // Sizes at least double from each level to the one before it.
        let sizes: Vec<usize> = idx[0].levels.iter().map(|l| l.len()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 1000);
        assert!(sizes.len() <= 11, "{sizes:?}");
        assert!(sizes.windows(2).all(|w| w[0] > 2 * w[1]), "{sizes:?}");
        assert!(extend_indexes("t", &s, k, Some(&idx), &[batch(&s, &[500], &[None])]).is_err());
    }

    #[test]
    fn a_table_made_from_a_query_keeps_lengths_but_not_keys_or_defaults() {
        let s = schema();
        let mut fields: Vec<Field> = s.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[0] = with_default(fields[0].clone(), "7");
        let s = Schema::new_with_metadata(fields, s.metadata().clone());
        assert_eq!(default_text(s.field(0)), Some("7"));
        let d = derived(&s);
        assert!(keys(&d).is_empty());
        assert_eq!(default_text(d.field(0)), None);
        assert_eq!(max_chars(d.field(1)), Some(3));
    }

    #[test]
    fn a_string_longer_than_its_column_is_refused_counting_characters() {
        let s = schema();
        let ok = StringArray::from(vec![Some("abc"), Some("äöü"), None]);
        assert!(check_length(s.field(1), &ok).is_ok());
        let long = StringArray::from(vec![Some("abcd")]);
        match check_length(s.field(1), &long) {
            Err(StorageError::StringTooLong(t)) => assert_eq!(t, "character varying(3)"),
            other => panic!("{other:?}"),
        }
    }
}
