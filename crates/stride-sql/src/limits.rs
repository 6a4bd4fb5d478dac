//! Bounds on what one statement may ask of a thread's stack.
//!
//! Parsing, binding, optimizing, lowering and evaluating a statement all
//! recurse over trees whose depth the client chooses: `x = 1 OR x = 2 OR …`
//! is a left-deep chain as deep as it has terms. Three measures keep every
//! such recursion inside a stack:
//!
//! 1. **A statement stack.** A session plans every request on a stack of at
//!    least [`STATEMENT_STACK`] bytes ([`on_statement_stack`]): threads made
//!    for sessions (the server's) are spawned with [`STATEMENT_THREAD_STACK`]
//!    and plan in place; any other caller's request moves to a fresh stack
//!    segment for its duration. DataFusion's own recursions (binding,
//!    tree-node rewrites, the optimizer, physical planning) grow their stack
//!    on demand (its `recursive_protection` feature).
//! 2. **Bounds on the text** ([`check_tokens`]), checked before parsing
//!    builds a tree: at most [`MAX_STATEMENT_TOKENS`] tokens, and no chain of
//!    more than [`MAX_OPERATOR_CHAIN`] arithmetic, comparison or
//!    concatenation operators (`a + a + … + a`). The parser's tree, its
//!    `Display` and its drop recurse as deep as the longest chain, and
//!    binding an operator chain costs time quadratic in its length (about
//!    two minutes for 20 000 terms), so such a chain is refused before any
//!    of that. Chains of `AND` / `OR` are not limited here: they are
//!    rebalanced (3.) and bind in linear time.
//! 3. **Balanced boolean chains** ([`rebalance_boolean_chains`], right after
//!    binding): a chain of more than [`REBALANCE_CHAIN`] `AND`s (or `OR`s)
//!    becomes a balanced tree, so the common deep case — a long list of
//!    alternatives — is only logarithmically deep from then on.
//!    Long chains of `UNION` (or of `UNION ALL`) are balanced the same way
//!    in the parsed text, before binding ([`rebalance_set_operations`]):
//!    binding a left-deep chain of `n` branches computes source spans and
//!    schemas at every level (quadratic: about a second for 2 000
//!    branches), and the optimizer walks it as deep as it is long.
//! 4. **A depth bound** on the bound plan ([`check_depth`], iterative): no
//!    expression nests deeper than [`MAX_EXPRESSION_DEPTH`], no plan deeper
//!    than [`MAX_PLAN_DEPTH`]. Everything after binding — Stride's lowering,
//!    plan fingerprints and `Display`, and expression evaluation on the
//!    scheduler's workers (whose stacks are sized for it) — recurses at most
//!    that deep.
//!
//! The parser itself counts its recursion (nested parentheses, subqueries)
//! and stops at [`PARSER_RECURSION_LIMIT`].
//!
//! A statement beyond a bound fails alone with SQLSTATE 54001
//! (`statement_too_complex`); the server keeps serving.

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_expr::{Expr, LogicalPlan, Operator};

use crate::error::{Result, SqlError};

/// Stack a request is planned on, at least.
pub const STATEMENT_STACK: usize = 256 << 20;
/// Stack size for threads that run sessions (the server's blocking threads):
/// large enough that [`on_statement_stack`] never switches stacks on them.
/// Only the pages a statement touches are ever committed.
pub const STATEMENT_THREAD_STACK: usize = STATEMENT_STACK + (16 << 20);
/// Most tokens in one request's text.
pub const MAX_STATEMENT_TOKENS: usize = 400_000;
/// Longest chain of binary operators other than `AND` / `OR` at one
/// nesting level.
pub const MAX_OPERATOR_CHAIN: usize = 1_000;
/// Deepest nesting the parser accepts (parentheses, subqueries).
pub const PARSER_RECURSION_LIMIT: usize = 1_000;
/// Deepest expression nesting accepted after binding.
pub const MAX_EXPRESSION_DEPTH: usize = 10_000;
/// Deepest plan (operators, including subqueries) accepted after binding.
pub const MAX_PLAN_DEPTH: usize = 10_000;

/// Runs `f` on a stack with at least [`STATEMENT_STACK`] bytes left: in
/// place when the current thread has them, on a fresh segment otherwise.
pub fn on_statement_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(STATEMENT_STACK, STATEMENT_STACK, f)
}

/// The error of a statement beyond a bound.
fn too_complex(what: String) -> SqlError {
    SqlError::TooComplex(what)
}

/// Refuses request texts with more than [`MAX_STATEMENT_TOKENS`] tokens or
/// an operator chain longer than [`MAX_OPERATOR_CHAIN`]. A text with fewer
/// operator characters than the chain bound and fewer bytes than the token
/// bound can exceed neither, and is not tokenized (the common case costs one
/// pass over its bytes).
pub fn check_tokens(sql: &str) -> Result<()> {
    use datafusion_sql::sqlparser::keywords::Keyword;
    use datafusion_sql::sqlparser::tokenizer::{Token, Tokenizer};
    let operator_bytes = sql.bytes().filter(|b| b"+-*/%|=<>^&".contains(b)).count();
    if sql.len() <= MAX_STATEMENT_TOKENS && operator_bytes <= MAX_OPERATOR_CHAIN {
        return Ok(());
    }
    let dialect = datafusion_sql::sqlparser::dialect::GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let mut count = 0usize;
    // Operators in the current chain, one counter per open parenthesis.
    let mut chains = vec![0usize];
    for t in &tokens {
        if matches!(t, Token::Whitespace(_)) {
            continue;
        }
        count += 1;
        match t {
            Token::LParen => {
                chains.push(0);
                continue;
            }
            Token::RParen if chains.len() > 1 => {
                chains.pop();
                continue;
            }
            _ => {}
        }
        let current = chains
            .last_mut()
            .expect("the outermost level is never popped");
        match t {
            Token::Comma | Token::SemiColon => *current = 0,
            Token::Word(w) if matches!(w.keyword, Keyword::AND | Keyword::OR) => *current = 0,
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::DuckIntDiv
            | Token::Mod
            | Token::StringConcat
            | Token::Caret
            | Token::Ampersand
            | Token::Pipe
            | Token::ShiftLeft
            | Token::ShiftRight
            | Token::Eq
            | Token::DoubleEq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::Spaceship => {
                *current += 1;
                if *current > MAX_OPERATOR_CHAIN {
                    return Err(too_complex(format!(
                        "a chain of more than {MAX_OPERATOR_CHAIN} operators"
                    )));
                }
            }
            _ => {}
        }
    }
    if count > MAX_STATEMENT_TOKENS {
        return Err(too_complex(format!(
            "the request has {count} tokens, at most {MAX_STATEMENT_TOKENS} are accepted"
        )));
    }
    Ok(())
}

/// Parses a request's text into statements within the bounds above: the
/// token bound first, then the parser's recursion limit; a text beyond
/// either fails with [`SqlError::TooComplex`], other bad text with
/// [`SqlError::Syntax`].
///
/// A request holding role statements (`CREATE ROLE` …, `GRANT`, `REVOKE`)
/// is cut at its statements: those parse in sqlparser's PostgreSQL dialect
/// (see [`crate::roles`]), the others in DataFusion's parser as always.
pub fn parse(sql: &str) -> Result<std::collections::VecDeque<datafusion_sql::parser::Statement>> {
    use datafusion_sql::sqlparser::parser::ParserError;
    check_tokens(sql)?;
    let Some(pieces) = crate::roles::split_role_statements(sql) else {
        return parse_plain(sql);
    };
    let mut out = std::collections::VecDeque::new();
    for piece in pieces {
        match piece {
            crate::roles::Piece::Plain(text) => out.extend(parse_plain(text)?),
            crate::roles::Piece::Role { text, create_user } => {
                let stmt =
                    crate::roles::parse_role_statement(&text, create_user, PARSER_RECURSION_LIMIT)
                        .map_err(|e| match e {
                            ParserError::RecursionLimitExceeded => too_complex(format!(
                                "the text nests more than {PARSER_RECURSION_LIMIT} levels deep"
                            )),
                            other => SqlError::Syntax(other.to_string()),
                        })?;
                out.push_back(datafusion_sql::parser::Statement::Statement(Box::new(stmt)));
            }
        }
    }
    Ok(out)
}

/// [`parse`] by DataFusion's parser alone.
fn parse_plain(sql: &str) -> Result<std::collections::VecDeque<datafusion_sql::parser::Statement>> {
    use datafusion_common::DataFusionError;
    use datafusion_sql::sqlparser::parser::ParserError;
    let parsed = datafusion_sql::parser::DFParserBuilder::new(sql)
        .with_recursion_limit(PARSER_RECURSION_LIMIT)
        .build()
        .and_then(|mut p| p.parse_statements());
    parsed
        .map_err(|e| match e {
            DataFusionError::SQL(p, _) if matches!(*p, ParserError::RecursionLimitExceeded) => {
                too_complex(format!(
                    "the text nests more than {PARSER_RECURSION_LIMIT} levels deep"
                ))
            }
            DataFusionError::SQL(p, _) => SqlError::Syntax(p.to_string()),
            other => SqlError::Syntax(other.to_string()),
        })
        .map(|mut statements| {
            statements.iter_mut().for_each(rebalance_set_operations);
            statements
        })
}

/// Turns every chain of more than [`REBALANCE_CHAIN`] `UNION`s of one kind
/// (all `UNION ALL`, or all `UNION [DISTINCT]`) into a balanced tree of the
/// same branches in the same order. Both operations are associative, the
/// leftmost branch (which names the columns) stays leftmost, and so the
/// result is the same; other set operations and mixed chains are left as
/// written.
pub fn rebalance_set_operations(statement: &mut datafusion_sql::parser::Statement) {
    use datafusion_sql::parser::{CopyToSource, Statement as DFStatement};
    use datafusion_sql::sqlparser::ast::{Query, VisitMut, VisitorMut};
    use std::ops::ControlFlow;

    struct Balancer;
    impl VisitorMut for Balancer {
        type Break = ();
        fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            balance_unions(&mut query.body);
            ControlFlow::Continue(())
        }
    }
    match statement {
        DFStatement::Statement(s) => {
            let _ = s.visit(&mut Balancer);
        }
        DFStatement::CopyTo(copy) => {
            if let CopyToSource::Query(q) = &mut copy.source {
                let _ = q.visit(&mut Balancer);
            }
        }
        DFStatement::Explain(explain) => rebalance_set_operations(&mut explain.statement),
        DFStatement::CreateExternalTable(_) | DFStatement::Reset(_) => {}
    }
}

/// [`rebalance_set_operations`] for one query body: the chain at its top,
/// then the set operations below.
fn balance_unions(body: &mut datafusion_sql::sqlparser::ast::SetExpr) {
    balance_top_chain(body);
    if let datafusion_sql::sqlparser::ast::SetExpr::SetOperation { left, right, .. } = body {
        balance_unions(left);
        balance_unions(right);
    }
}

/// Balances the chain of `UNION`s of one kind at the top of `body`, if it
/// is longer than [`REBALANCE_CHAIN`].
fn balance_top_chain(body: &mut datafusion_sql::sqlparser::ast::SetExpr) {
    use datafusion_sql::sqlparser::ast::{SetExpr, SetOperator, SetQuantifier, Values};

    let SetExpr::SetOperation {
        op: SetOperator::Union,
        set_quantifier: quantifier,
        ..
    } = &*body
    else {
        return;
    };
    let quantifier = *quantifier;
    if !matches!(
        quantifier,
        SetQuantifier::All | SetQuantifier::Distinct | SetQuantifier::None
    ) {
        return;
    }
    let same = |e: &SetExpr| {
        matches!(e, SetExpr::SetOperation { op: SetOperator::Union, set_quantifier, .. }
            if *set_quantifier == quantifier)
    };
    let mut branches = 1;
    let mut at: &SetExpr = body;
    while let SetExpr::SetOperation { left, .. } = at {
        if !same(at) {
            break;
        }
        branches += 1;
        at = left;
    }
    if branches <= REBALANCE_CHAIN {
        return;
    }
    // Unlink the chain without recursion: rights from last to first, then
    // the leftmost branch.
    let placeholder = || {
        SetExpr::Values(Values {
            explicit_row: false,
            value_keyword: false,
            rows: Vec::new(),
        })
    };
    let mut leaves = Vec::with_capacity(branches);
    let mut node = std::mem::replace(body, placeholder());
    loop {
        if !same(&node) {
            leaves.push(node);
            break;
        }
        let SetExpr::SetOperation { left, right, .. } = node else {
            unreachable!("`same` matched a set operation")
        };
        leaves.push(*right);
        node = *left;
    }
    leaves.reverse();
    fn build(
        leaves: &mut std::vec::Drain<'_, SetExpr>,
        n: usize,
        quantifier: SetQuantifier,
    ) -> SetExpr {
        if n == 1 {
            return leaves.next().expect("a branch per leaf");
        }
        let left = build(leaves, n / 2, quantifier);
        let right = build(leaves, n - n / 2, quantifier);
        SetExpr::SetOperation {
            left: Box::new(left),
            op: SetOperator::Union,
            set_quantifier: quantifier,
            right: Box::new(right),
        }
    }
    let n = leaves.len();
    *body = build(&mut leaves.drain(..), n, quantifier);
}

/// Checks a bound plan against [`MAX_PLAN_DEPTH`] and
/// [`MAX_EXPRESSION_DEPTH`] without recursing.
pub fn check_depth(plan: &LogicalPlan) -> Result<()> {
    check_plan(plan, 1)
}

/// [`check_depth`] for a plan that sits `base` operators deep. Recurses only
/// into subqueries, which the parser's recursion limit bounds.
fn check_plan(plan: &LogicalPlan, base: usize) -> Result<()> {
    let mut plans: Vec<(&LogicalPlan, usize)> = vec![(plan, base)];
    let mut subqueries: Vec<(std::sync::Arc<LogicalPlan>, usize)> = Vec::new();
    while let Some((node, depth)) = plans.pop() {
        if depth > MAX_PLAN_DEPTH {
            return Err(too_complex(format!(
                "the plan nests more than {MAX_PLAN_DEPTH} operators deep"
            )));
        }
        for input in node.inputs() {
            plans.push((input, depth + 1));
        }
        let mut failed = None;
        node.apply_expressions(|root| {
            let mut exprs: Vec<(&Expr, usize)> = vec![(root, 1)];
            while let Some((e, d)) = exprs.pop() {
                if d > MAX_EXPRESSION_DEPTH {
                    failed = Some(too_complex(format!(
                        "an expression nests more than {MAX_EXPRESSION_DEPTH} levels deep"
                    )));
                    return Ok(TreeNodeRecursion::Stop);
                }
                match e {
                    Expr::ScalarSubquery(s) => subqueries.push((s.subquery.clone(), depth + 1)),
                    Expr::Exists(x) => subqueries.push((x.subquery.subquery.clone(), depth + 1)),
                    Expr::InSubquery(x) => {
                        subqueries.push((x.subquery.subquery.clone(), depth + 1))
                    }
                    _ => {}
                }
                e.apply_children(|c| {
                    exprs.push((c, d + 1));
                    Ok(TreeNodeRecursion::Continue)
                })?;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    for (sub, depth) in subqueries {
        check_plan(&sub, depth)?;
    }
    Ok(())
}

/// Chains of one associative boolean operator longer than this are rebuilt
/// as balanced trees.
pub const REBALANCE_CHAIN: usize = 32;

/// `e` with every long chain of `AND` (or of `OR`) rebuilt as a balanced
/// tree, so that evaluating it recurses logarithmically deep rather than as
/// deep as the chain is long; `None` when there is no such chain. `AND` and
/// `OR` are associative in SQL's three-valued logic, so the value is the
/// same. Iterative, as the chain may be deep.
fn rebalance(e: &Expr) -> Option<Expr> {
    fn chain_op(e: &Expr) -> Option<Operator> {
        match e {
            Expr::BinaryExpr(b) if matches!(b.op, Operator::And | Operator::Or) => Some(b.op),
            _ => None,
        }
    }
    // Flattens the maximal chain of `op` rooted at `e` into its operands.
    fn operands(e: &Expr, op: Operator) -> Vec<&Expr> {
        let mut out = Vec::new();
        let mut stack = vec![e];
        while let Some(x) = stack.pop() {
            match x {
                Expr::BinaryExpr(b) if b.op == op => {
                    stack.push(&b.right);
                    stack.push(&b.left);
                }
                other => out.push(other),
            }
        }
        out
    }
    fn balanced(items: Vec<Expr>, op: Operator) -> Expr {
        let mut level = items;
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            let mut it = level.into_iter();
            while let Some(a) = it.next() {
                next.push(match it.next() {
                    Some(b) => Expr::BinaryExpr(datafusion_expr::BinaryExpr::new(
                        Box::new(a),
                        op,
                        Box::new(b),
                    )),
                    None => a,
                });
            }
            level = next;
        }
        level.pop().unwrap_or(Expr::Literal(
            datafusion_common::ScalarValue::Boolean(Some(op == Operator::And)),
            None,
        ))
    }
    // Only a chain at the root is rebalanced in place; deeper chains (inside
    // CASE, NOT, …) are found by walking the tree once, iteratively.
    let mut long_chain = false;
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        if let Some(op) = chain_op(x) {
            let ops = operands(x, op);
            if ops.len() > REBALANCE_CHAIN {
                long_chain = true;
                break;
            }
            stack.extend(ops);
        } else {
            let _ = x.apply_children(|c| {
                stack.push(c);
                Ok(TreeNodeRecursion::Continue)
            });
        }
    }
    if !long_chain {
        return None;
    }
    let rebuilt = e.clone().transform_down(|x| match chain_op(&x) {
        Some(op) => {
            let items: Vec<Expr> = operands(&x, op).into_iter().cloned().collect();
            if items.len() > REBALANCE_CHAIN {
                // The operands are rebalanced on their own; the new tree's
                // inner nodes are not visited again.
                let items = items
                    .into_iter()
                    .map(|i| rebalance(&i).unwrap_or(i))
                    .collect();
                Ok(Transformed::new(
                    balanced(items, op),
                    true,
                    TreeNodeRecursion::Jump,
                ))
            } else {
                Ok(Transformed::no(x))
            }
        }
        None => Ok(Transformed::no(x)),
    });
    rebuilt.ok().map(|t| t.data)
}

/// Rebalances the long `AND` / `OR` chains of every expression in `plan`
/// (subqueries included); plans without one come back unchanged.
pub fn rebalance_boolean_chains(plan: LogicalPlan) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|e| match rebalance(&e) {
            Some(b) => Ok(Transformed::yes(b)),
            None => Ok(Transformed::no(e)),
        })
    })?;
    Ok(rewritten.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_expr::{col, lit, LogicalPlanBuilder};

    fn chain(n: usize) -> Expr {
        let mut e = col("a").eq(lit(0));
        for i in 1..n {
            e = e.or(col("a").eq(lit(i as i64)));
        }
        e
    }

    fn plan_with(filter: Expr) -> LogicalPlan {
        LogicalPlanBuilder::empty(true)
            .project(vec![lit(1i64).alias("a")])
            .unwrap()
            .filter(filter)
            .unwrap()
            .build()
            .unwrap()
    }

    #[test]
    fn depth_bounds() {
        on_statement_stack(|| {
            assert!(check_depth(&plan_with(chain(1000))).is_ok());
            let deep = plan_with(chain(MAX_EXPRESSION_DEPTH + 10));
            assert!(matches!(check_depth(&deep), Err(SqlError::TooComplex(_))));
        });
    }

    #[test]
    fn token_bound() {
        assert!(check_tokens("select 1").is_ok());
        let long = format!(
            "select 1 where {}",
            "1 = 1 or ".repeat(MAX_STATEMENT_TOKENS / 4)
        );
        assert!(matches!(check_tokens(&long), Err(SqlError::TooComplex(_))));
        // Long but few tokens: one big string literal.
        let literal = format!("select '{}'", "x".repeat(MAX_STATEMENT_TOKENS * 2));
        assert!(check_tokens(&literal).is_ok());
        // An arithmetic chain beyond the bound; the same terms in a list, in
        // parentheses or joined by AND are fine.
        let chain = |sep: &str| vec!["a + 1 = 2"; MAX_OPERATOR_CHAIN].join(sep);
        assert!(matches!(
            check_tokens(&format!("select {}", chain(" + "))),
            Err(SqlError::TooComplex(_))
        ));
        for sep in [", ", " and ", " or "] {
            assert!(
                check_tokens(&format!("select {}", chain(sep))).is_ok(),
                "{sep}"
            );
        }
        let nested = format!(
            "select {}",
            vec!["(a + 1 = 2)"; MAX_OPERATOR_CHAIN].join(" and ")
        );
        assert!(check_tokens(&nested).is_ok());
    }

    /// The query body of the one statement `sql` parses to.
    fn body(sql: &str) -> datafusion_sql::sqlparser::ast::SetExpr {
        use datafusion_sql::parser::Statement as DFStatement;
        use datafusion_sql::sqlparser::ast::Statement;
        let mut parsed = parse(sql).unwrap();
        let DFStatement::Statement(s) = parsed.pop_front().unwrap() else {
            panic!("not a query")
        };
        let Statement::Query(q) = *s else {
            panic!("not a query")
        };
        *q.body
    }

    /// Depth of the set-operation tree and its branches (`select N`), in order.
    fn shape(
        e: &datafusion_sql::sqlparser::ast::SetExpr,
        depth: usize,
        out: &mut Vec<String>,
    ) -> usize {
        use datafusion_sql::sqlparser::ast::SetExpr;
        match e {
            SetExpr::SetOperation { left, right, .. } => {
                shape(left, depth + 1, out).max(shape(right, depth + 1, out))
            }
            other => {
                out.push(other.to_string());
                depth
            }
        }
    }

    fn union_chain(n: usize, op: &str) -> String {
        (0..n)
            .map(|i| format!("select {i}"))
            .collect::<Vec<_>>()
            .join(&format!(" {op} "))
    }

    #[test]
    fn long_union_chains_are_balanced_in_order() {
        on_statement_stack(|| {
            for op in ["union all", "union", "union distinct"] {
                let mut branches = Vec::new();
                let depth = shape(&body(&union_chain(1000, op)), 0, &mut branches);
                assert!(depth <= 11, "{op}: depth {depth}");
                let expected: Vec<_> = (0..1000).map(|i| format!("SELECT {i}")).collect();
                assert_eq!(branches, expected, "{op}: branches keep their order");
            }
            // Short chains stay as written (left-deep).
            let mut branches = Vec::new();
            let n = REBALANCE_CHAIN;
            assert_eq!(
                shape(&body(&union_chain(n, "union all")), 0, &mut branches),
                n - 1
            );
        });
    }

    #[test]
    fn mixed_and_non_associative_chains_are_left_alone() {
        on_statement_stack(|| {
            // EXCEPT is not associative: a long chain keeps its shape.
            let mut branches = Vec::new();
            assert_eq!(
                shape(&body(&union_chain(100, "except")), 0, &mut branches),
                99
            );
            // A UNION ALL chain ending in one UNION: the top is the UNION,
            // its left a balanced UNION ALL chain of the other branches.
            use datafusion_sql::sqlparser::ast::{SetExpr, SetQuantifier};
            let sql = format!("{} union select 100", union_chain(100, "union all"));
            let SetExpr::SetOperation {
                left,
                set_quantifier,
                ..
            } = body(&sql)
            else {
                panic!("a set operation")
            };
            assert_eq!(set_quantifier, SetQuantifier::None);
            let mut branches = Vec::new();
            assert!(shape(&left, 0, &mut branches) <= 8);
            assert_eq!(branches.len(), 100);
        });
    }
}
