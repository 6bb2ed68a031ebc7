//! A small document of sentences and tables, written either as Markdown (the terminal,
//! the README) or as HTML (the report). The figures are laid out once, here, and
//! each output only spells them.

use std::fmt::Write;

use super::escape;

/// How a column's cells line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    /// For figures, so their digits line up.
    Right,
}

/// A table: a header, then rows of cells already formatted.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

/// One piece of a document.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// Sentences; each line is a paragraph of its own in HTML.
    Text(String),
    Table(Table),
}

impl Table {
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Table {
            columns: columns.iter().map(|(name, align)| (name.to_string(), *align)).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// The header and the alignment row, in Markdown.
    pub fn markdown_head(&self) -> String {
        let names: Vec<String> = self.columns.iter().map(|(name, _)| name.clone()).collect();
        let aligns: Vec<String> = self
            .columns
            .iter()
            .map(|(_, align)| match align {
                Align::Left => "---".to_owned(),
                Align::Right => "---:".to_owned(),
            })
            .collect();
        markdown_row(&names) + &markdown_row(&aligns)
    }

    pub fn markdown(&self) -> String {
        let mut out = self.markdown_head();
        self.rows.iter().for_each(|row| out.push_str(&markdown_row(row)));
        out
    }

    pub fn html(&self) -> String {
        let mut html = String::from("<table>\n<tr>");
        for (name, _) in &self.columns {
            let _ = write!(html, "<th>{}</th>", escape(name));
        }
        html.push_str("</tr>\n");
        for row in &self.rows {
            html.push_str("<tr>");
            for (column, cell) in row.iter().enumerate() {
                // The first column names the row and the style sheet aligns it left;
                // other text columns say so themselves.
                let text = column > 0 && self.columns.get(column).is_some_and(|(_, align)| *align == Align::Left);
                let class = if text { " class=\"text\"" } else { "" };
                let _ = write!(html, "<td{class}>{}</td>", escape(cell));
            }
            html.push_str("</tr>\n");
        }
        html.push_str("</table>\n");
        html
    }
}

/// One Markdown table row: `| a | b |`.
pub fn markdown_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

/// The blocks as Markdown, a blank line between two.
pub fn markdown(blocks: &[Block]) -> String {
    let written: Vec<String> = blocks
        .iter()
        .map(|block| match block {
            Block::Text(text) => format!("{}\n", text.trim_end()),
            Block::Table(table) => table.markdown(),
        })
        .collect();
    written.join("\n")
}

/// The blocks as HTML.
pub fn html(blocks: &[Block]) -> String {
    let mut html = String::new();
    for block in blocks {
        match block {
            Block::Text(text) => {
                for line in text.lines().filter(|line| !line.trim().is_empty()) {
                    let _ = writeln!(html, "<p>{}</p>", escape(line.trim()));
                }
            }
            Block::Table(table) => html.push_str(&table.html()),
        }
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut table = Table::new(&[("a", Align::Left), ("b", Align::Right), ("c", Align::Left)]);
        table.push(vec!["x <y>".into(), "1".into(), "z".into()]);
        table
    }

    #[test]
    fn a_table_is_written_as_markdown_with_its_alignment_row() {
        assert_eq!(
            table().markdown(),
            "| a | b | c |\n| --- | ---: | --- |\n| x <y> | 1 | z |\n"
        );
    }

    #[test]
    fn a_table_is_written_as_html_escaped_and_without_an_alignment_row() {
        let html = table().html();
        assert!(html.contains("<tr><th>a</th><th>b</th><th>c</th></tr>"), "{html}");
        assert!(
            html.contains("<tr><td>x &lt;y&gt;</td><td>1</td><td class=\"text\">z</td></tr>"),
            "{html}"
        );
        assert!(!html.contains("---"));
    }

    #[test]
    fn blocks_are_separated_by_one_blank_line_in_markdown() {
        let blocks = [
            Block::Text("Some words.".into()),
            Block::Table(table()),
            Block::Text("More.\nAnd more.\n".into()),
        ];
        assert_eq!(
            markdown(&blocks),
            format!("Some words.\n\n{}\nMore.\nAnd more.\n", table().markdown())
        );
        assert!(html(&blocks).contains("<p>More.</p>\n<p>And more.</p>"));
    }
}
