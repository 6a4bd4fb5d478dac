//! Printing results and the interactive shell.

use std::io::{BufRead, Write};

use anyhow::Result;
use arrow::util::pretty::pretty_format_batches;
use stride_sql::{Session, StatementOutput};

/// Prints one statement's output.
pub fn print_output(out: &StatementOutput, w: &mut dyn Write) -> Result<()> {
    match out {
        StatementOutput::Query(q) => {
            if q.batches.is_empty() {
                let empty = arrow::array::RecordBatch::new_empty(q.schema.clone());
                writeln!(w, "{}", pretty_format_batches(&[empty])?)?;
            } else {
                writeln!(w, "{}", pretty_format_batches(&q.batches)?)?;
            }
            let rows = q.num_rows();
            writeln!(
                w,
                "({rows} row{}) planning {:.2?}, execution {:.2?} (queue wait {:.2?}, cpu {:.2?}, {} tasks, {} morsels)",
                if rows == 1 { "" } else { "s" },
                q.planning,
                q.execution,
                q.stats.queue_wait,
                q.stats.cpu_time,
                q.stats.tasks,
                q.stats.morsels
            )?;
        }
        StatementOutput::Command { tag } => writeln!(w, "{tag}")?,
        StatementOutput::Explain(text) => writeln!(w, "{text}")?,
        StatementOutput::Deallocate { tag, .. } => writeln!(w, "{tag}")?,
        StatementOutput::CopyIn(_) | StatementOutput::CopyOut(_) => writeln!(
            w,
            "COPY needs a client connection (stride serve, then psql's \\copy)"
        )?,
    }
    Ok(())
}

/// Runs SQL text; prints results or the error. Returns whether all statements succeeded.
pub fn run_text(session: &mut Session, sql: &str, w: &mut dyn Write) -> Result<bool> {
    for result in session.execute_statements(sql) {
        match result {
            Ok(output) => print_output(&output, w)?,
            Err(e) => {
                writeln!(w, "ERROR: {e}")?;
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// A line-oriented shell: collects lines until one ends with `;`.
pub fn interactive(session: &mut Session) -> Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let mut buffer = String::new();
    let prompt = |buffer: &str, out: &mut std::io::Stdout| -> Result<()> {
        write!(
            out,
            "{}",
            if buffer.is_empty() {
                "stride> "
            } else {
                "   ...> "
            }
        )?;
        out.flush()?;
        Ok(())
    };
    writeln!(
        out,
        "Stride shell. End statements with ';'. \\q quits. Default schema: {}",
        session.default_schema()
    )?;
    prompt(&buffer, &mut out)?;
    for line in stdin.lock().lines() {
        let line = line?;
        let trimmed = line.trim();
        if buffer.is_empty() && (trimmed == "\\q" || trimmed == "exit" || trimmed == "quit") {
            break;
        }
        buffer.push_str(&line);
        buffer.push('\n');
        if trimmed.ends_with(';') {
            run_text(session, &buffer, &mut out)?;
            buffer.clear();
        }
        prompt(&buffer, &mut out)?;
    }
    if !buffer.trim().is_empty() {
        run_text(session, &buffer, &mut out)?;
    }
    Ok(())
}
