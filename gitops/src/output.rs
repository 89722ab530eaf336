//! `-o table|json|yaml|markdown`: every read verb prints a view as a table
//! for a person, as JSON or YAML for a script, or as markdown for a
//! pull-request comment (the table in a fenced block, unless the verb has
//! a markdown of its own, as `preview` has).

use clap::ValueEnum;
use serde::Serialize;

use crate::Failure;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
    Yaml,
    Markdown,
}

/// `view` in `format`; `table` renders it for a terminal.
pub fn print<T: Serialize>(
    format: Format,
    view: &T,
    table: impl FnOnce(&T) -> String,
) -> Result<(), Failure> {
    let text = match format {
        Format::Table => table(view),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(view)
                .map_err(|e| Failure::error(format!("encoding JSON: {e}")))?;
            s.push('\n');
            s
        }
        Format::Yaml => serde_saphyr::to_string(view)
            .map_err(|e| Failure::error(format!("encoding YAML: {e}")))?,
        Format::Markdown => format!("```\n{}```\n", table(view)),
    };
    print!("{text}");
    Ok(())
}

/// Rows under `header`, each column as wide as its widest cell; the last
/// column is not padded.
pub fn table<const N: usize>(header: &[String; N], rows: &[[String; N]]) -> String {
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let header = ["A", "B", "C"].map(String::from);
        let rows = [
            ["long-name", "x", "last"].map(String::from),
            ["s", "yy", ""].map(String::from),
        ];
        assert_eq!(
            table(&header, &rows),
            "A          B   C\nlong-name  x   last\ns          yy\n"
        );
    }
}
