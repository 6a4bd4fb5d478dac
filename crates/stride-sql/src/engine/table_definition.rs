//! What `CREATE TABLE` declares beyond column types and `NOT NULL`:
//! `PRIMARY KEY` and `UNIQUE` keys (column or table constraints), the
//! lengths of `varchar(n)` columns and `DEFAULT` expressions (planned into
//! each `INSERT` that leaves their column out: `crate::context`). Stride enforces them
//! (`stride_storage::constraints`); what it would not enforce it refuses
//! (`REFERENCES`, `CHECK`, `char(n)`, `NULLS NOT DISTINCT`, deferrable
//! keys, index options), so that nothing declared is silently ignored.
//!
//! The declaration is read from the statement as written and attached to
//! the bound plan's schema ([`Declared::apply`]) — key names and lengths
//! do not survive DataFusion's planner otherwise.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use datafusion_common::DFSchema;
use datafusion_expr::logical_plan::{DdlStatement, EmptyRelation};
use datafusion_expr::LogicalPlan;
use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::{
    ColumnOption, CreateTable, DataType, Expr, IndexColumn, NullsDistinctOption, Statement,
    TableConstraint,
};
use stride_storage::constraints::{self, KeyConstraint};

use crate::error::{PlanKind, Result, SqlError, UndefinedKind};
use crate::pg_compat::folded;

/// A key as declared: its name if given, its columns by name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DeclaredKey {
    name: Option<String>,
    primary: bool,
    columns: Vec<String>,
}

/// What a `CREATE TABLE` declares that its bound plan does not keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Declared {
    keys: Vec<DeclaredKey>,
    /// `varchar(n)` columns: (column, n).
    lengths: Vec<(String, usize)>,
    /// `DEFAULT` expressions: (column, SQL text).
    defaults: Vec<(String, String)>,
}

/// The declaration of `stmt` if it is a `CREATE TABLE` with column
/// definitions; refuses what Stride would not enforce.
pub(super) fn declared(stmt: &DFStatement) -> Result<Option<Declared>> {
    let DFStatement::Statement(s) = stmt else {
        return Ok(None);
    };
    let Statement::CreateTable(create) = s.as_ref() else {
        return Ok(None);
    };
    read(create).map(Some)
}

fn refuse(what: String) -> SqlError {
    SqlError::Unsupported(format!("{what}: Stride does not enforce it"))
}

fn read(create: &CreateTable) -> Result<Declared> {
    let mut out = Declared::default();
    for column in &create.columns {
        let name = folded(&column.name);
        match &column.data_type {
            DataType::Varchar(Some(length))
            | DataType::CharacterVarying(Some(length))
            | DataType::CharVarying(Some(length))
            | DataType::Nvarchar(Some(length)) => {
                out.lengths.push((name.clone(), character_length(length)?));
            }
            DataType::Char(Some(_)) | DataType::Character(Some(_)) => {
                return Err(SqlError::Unsupported(format!(
                    "the blank-padded type {} of column \"{}\" (use varchar or text)",
                    column.data_type, column.name
                )))
            }
            _ => {}
        }
        for option in &column.options {
            let key = match &option.option {
                ColumnOption::PrimaryKey(p) => {
                    if p.characteristics.is_some() || !p.index_options.is_empty() {
                        return Err(refuse(format!("PRIMARY KEY option on column \"{name}\"")));
                    }
                    DeclaredKey {
                        name: option.name.as_ref().or(p.name.as_ref()).map(folded),
                        primary: true,
                        columns: vec![name.clone()],
                    }
                }
                ColumnOption::Unique(u) => {
                    if u.characteristics.is_some()
                        || !u.index_options.is_empty()
                        || u.nulls_distinct == NullsDistinctOption::NotDistinct
                    {
                        return Err(refuse(format!("UNIQUE option on column \"{name}\"")));
                    }
                    DeclaredKey {
                        name: option.name.as_ref().or(u.name.as_ref()).map(folded),
                        primary: false,
                        columns: vec![name.clone()],
                    }
                }
                ColumnOption::ForeignKey(_) => {
                    return Err(refuse(format!("REFERENCES on column \"{name}\"")))
                }
                ColumnOption::Check(_) => {
                    return Err(refuse(format!("CHECK on column \"{name}\"")))
                }
                ColumnOption::Default(e) => {
                    out.defaults.push((name.clone(), e.to_string()));
                    continue;
                }
                _ => continue,
            };
            out.keys.push(key);
        }
    }
    for constraint in &create.constraints {
        let key = match constraint {
            TableConstraint::PrimaryKey(p)
                if p.characteristics.is_none()
                    && p.index_options.is_empty()
                    && p.index_name.is_none()
                    && p.index_type.is_none() =>
            {
                DeclaredKey {
                    name: p.name.as_ref().map(folded),
                    primary: true,
                    columns: key_columns(&p.columns)?,
                }
            }
            TableConstraint::Unique(u)
                if u.characteristics.is_none()
                    && u.index_options.is_empty()
                    && u.index_name.is_none()
                    && u.index_type.is_none()
                    && u.nulls_distinct != NullsDistinctOption::NotDistinct =>
            {
                DeclaredKey {
                    name: u.name.as_ref().map(folded),
                    primary: false,
                    columns: key_columns(&u.columns)?,
                }
            }
            other => return Err(refuse(format!("the table constraint {other}"))),
        };
        out.keys.push(key);
    }
    // Checked here, before DataFusion's planner refuses it as a plain
    // planning error.
    let names: Vec<String> = create.columns.iter().map(|c| folded(&c.name)).collect();
    if !names.is_empty() {
        for column in out.keys.iter().flat_map(|k| &k.columns) {
            if !names.contains(column) {
                return Err(SqlError::undefined(
                    UndefinedKind::Column,
                    format!("column \"{column}\" named in key does not exist"),
                ));
            }
        }
    }
    Ok(out)
}

fn character_length(length: &datafusion_sql::sqlparser::ast::CharacterLength) -> Result<usize> {
    use datafusion_sql::sqlparser::ast::CharacterLength;
    match length {
        CharacterLength::IntegerLength { length, .. } if *length >= 1 && *length <= 10_485_760 => {
            Ok(*length as usize)
        }
        CharacterLength::IntegerLength { length, .. } => Err(SqlError::plan(
            PlanKind::InvalidParameter,
            format!("length for type varchar must be between 1 and 10485760, not {length}"),
        )),
        CharacterLength::Max => Err(SqlError::Unsupported("varchar(max)".into())),
    }
}

fn key_columns(columns: &[IndexColumn]) -> Result<Vec<String>> {
    columns
        .iter()
        .map(|c| match (&c.column.expr, &c.operator_class) {
            (Expr::Identifier(i), None) if c.column.options.asc.is_none() => Ok(folded(i)),
            _ => Err(refuse(format!("the key element {}", c.column))),
        })
        .collect()
}

impl Declared {
    /// Whether anything is declared.
    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.lengths.is_empty() && self.defaults.is_empty()
    }

    /// `plan` (a bound `CREATE TABLE`) with the declaration in its
    /// schema: keys named as PostgreSQL names them where the statement
    /// did not (`t_pkey`, `t_a_b_key`), primary-key columns `NOT NULL`,
    /// lengths on their columns. Other plans are returned as they are.
    pub(super) fn apply(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        if self.is_empty() {
            return Ok(plan);
        }
        let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(mut create)) = plan else {
            return Ok(plan);
        };
        if !matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(e) if !e.produce_one_row) {
            return Err(SqlError::Unsupported(
                "keys or lengths in CREATE TABLE … AS".into(),
            ));
        }
        let table = create.name.table().to_string();
        let schema = self.schema(&table, create.input.schema().as_arrow())?;
        create.input = Arc::new(LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(DFSchema::try_from(schema.as_ref().clone())?),
        }));
        // DataFusion's own copy of the keys is not used: Stride reads them
        // from the schema.
        create.constraints = Default::default();
        Ok(LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)))
    }

    fn schema(&self, table: &str, schema: &Schema) -> Result<SchemaRef> {
        let index = |column: &str| {
            schema.index_of(column).map_err(|_| {
                SqlError::undefined(
                    UndefinedKind::Column,
                    format!("column \"{column}\" named in key does not exist"),
                )
            })
        };
        let mut fields: Vec<arrow::datatypes::Field> =
            schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        for (column, n) in &self.lengths {
            let i = index(column)?;
            fields[i] = constraints::with_max_chars(fields[i].clone(), *n);
        }
        for (column, sql) in &self.defaults {
            let i = index(column)?;
            fields[i] = constraints::with_default(fields[i].clone(), sql);
        }
        let mut keys: Vec<KeyConstraint> = Vec::new();
        let mut taken: Vec<String> = Vec::new();
        for key in &self.keys {
            if key.primary && keys.iter().any(|k| k.primary) {
                return Err(SqlError::plan(
                    PlanKind::InvalidTableDefinition,
                    format!("multiple primary keys for table \"{table}\" are not allowed"),
                ));
            }
            let mut columns = Vec::with_capacity(key.columns.len());
            for c in &key.columns {
                let i = index(c)?;
                if columns.contains(&i) {
                    return Err(SqlError::plan(
                        PlanKind::DuplicateColumn,
                        format!("column \"{c}\" appears twice in key"),
                    ));
                }
                columns.push(i);
            }
            // PostgreSQL keeps one key for a key declared twice over the
            // same columns, the primary one if either is.
            if keys.iter().any(|k| k.columns == columns && !key.primary) {
                continue;
            }
            if key.primary {
                keys.retain(|k| k.columns != columns);
            }
            if key.primary {
                for &i in &columns {
                    fields[i] = fields[i].clone().with_nullable(false);
                }
            }
            let name = match &key.name {
                Some(n) if taken.contains(n) => {
                    return Err(SqlError::plan(
                        PlanKind::InvalidTableDefinition,
                        format!("relation \"{n}\" already exists"),
                    ))
                }
                Some(n) => n.clone(),
                None => default_name(table, key.primary, &key.columns, &taken),
            };
            taken.push(name.clone());
            keys.push(KeyConstraint {
                name,
                primary: key.primary,
                columns,
            });
        }
        let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
        Ok(Arc::new(constraints::with_keys(schema, &keys)?))
    }
}

/// PostgreSQL's name for an unnamed key: `t_pkey`, `t_a_b_key`, with a
/// number appended where that name is taken (`t_a_key1`).
fn default_name(table: &str, primary: bool, columns: &[String], taken: &[String]) -> String {
    let base = if primary {
        format!("{table}_pkey")
    } else {
        format!("{table}_{}_key", columns.join("_"))
    };
    if !taken.contains(&base) {
        return base;
    }
    (1..)
        .map(|n| format!("{base}{n}"))
        .find(|n| !taken.contains(n))
        .unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Result<Option<Declared>> {
        let mut stmts = crate::limits::parse(sql).unwrap();
        declared(&stmts.pop_front().unwrap())
    }

    fn keys(sql: &str, table: &str, columns: &[&str]) -> Result<Vec<KeyConstraint>> {
        let d = parse(sql)?.unwrap();
        let schema = Schema::new(
            columns
                .iter()
                .map(|c| arrow::datatypes::Field::new(*c, arrow::datatypes::DataType::Int32, true))
                .collect::<Vec<_>>(),
        );
        let s = d.schema(table, &schema)?;
        Ok(constraints::keys(&s))
    }

    #[test]
    fn keys_are_named_as_postgresql_names_them() {
        let k = keys(
            "create table t (a int primary key, b int unique, c int, unique (b, c), \
             constraint mine unique (c), unique (b))",
            "t",
            &["a", "b", "c"],
        )
        .unwrap();
        let names: Vec<&str> = k.iter().map(|k| k.name.as_str()).collect();
        // `unique (b)` repeats the column's own key and is folded into it.
        assert_eq!(names, ["t_pkey", "t_b_key", "t_b_c_key", "mine"]);
        assert!(k[0].primary && k[0].columns == [0]);
        assert_eq!(k[2].columns, [1, 2]);
    }

    #[test]
    fn a_primary_key_makes_its_columns_not_null() {
        let d = parse("create table t (a int, b int, primary key (b, a))")
            .unwrap()
            .unwrap();
        let schema = Schema::new(vec![
            arrow::datatypes::Field::new("a", arrow::datatypes::DataType::Int32, true),
            arrow::datatypes::Field::new("b", arrow::datatypes::DataType::Int32, true),
        ]);
        let s = d.schema("t", &schema).unwrap();
        assert!(!s.field(0).is_nullable() && !s.field(1).is_nullable());
        assert_eq!(constraints::keys(&s)[0].columns, [1, 0]);
    }

    #[test]
    fn contradictions_and_what_is_not_enforced_are_refused() {
        let two = keys(
            "create table t (a int primary key, b int, primary key (b))",
            "t",
            &["a", "b"],
        );
        assert!(matches!(
            two,
            Err(SqlError::Plan {
                kind: PlanKind::InvalidTableDefinition,
                ..
            })
        ));
        assert!(matches!(
            keys("create table t (a int, unique (z))", "t", &["a"]),
            Err(SqlError::Undefined { .. })
        ));
        for sql in [
            "create table t (a int references u (a))",
            "create table t (a int check (a > 0))",
            "create table t (a char(3))",
            "create table t (a int, unique nulls not distinct (a))",
            "create table t (a int, foreign key (a) references u (a))",
            "create table t (a int primary key deferrable)",
        ] {
            assert!(matches!(parse(sql), Err(SqlError::Unsupported(_))), "{sql}");
        }
        assert!(parse("create table t (a varchar(0))").is_err());
    }

    #[test]
    fn varchar_lengths_are_kept_on_their_columns() {
        let d = parse("create table t (a varchar(5), b text default 'x', c character varying(2))")
            .unwrap()
            .unwrap();
        assert_eq!(d.lengths, [("a".to_string(), 5), ("c".to_string(), 2)]);
        assert_eq!(d.defaults, [("b".to_string(), "'x'".to_string())]);
    }
}
