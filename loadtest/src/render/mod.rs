//! What a reader sees. The verdict and the benchmark only measure; every table, chart
//! and page is drawn here. Tables and charts are escaped by one [`escape`]; the report's
//! page is an askama template, which escapes what it is given.
//!
//! 1. [`document`]: sentences and tables, written as Markdown or as HTML.
//! 2. [`text`]: the verdict of one run, as the terminal prints it; [`checks`], the
//!    history's checks alone (`loadtest check`).
//! 3. [`tables`]: the tables that compare runs, strategies and locks.
//! 4. [`chart`]: the SVG charts, hand-written and self-contained.
//! 5. [`html`]: the benchmark's report, one HTML file that loads nothing
//!    (`loadtest/templates/report.html`).
//! 6. [`timeline`]: one run's history as a page: a bar per request, the faults as bands,
//!    the requests that fail a check in red.

pub mod document;
pub mod checks;

pub mod text;

pub mod tables;

pub mod chart;

pub mod html;

pub mod timeline;

/// Text made safe to put inside HTML or SVG, in an element or in a quoted attribute.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A figure per sale: `12.3`, or `-` when nothing was sold to divide by.
pub fn per_sale_label(value: Option<f64>) -> String {
    value.map_or("-".to_owned(), |value| format!("{value:.1}"))
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escape_covers_the_five_characters_html_gives_a_meaning() {
        assert_eq!(
            escape(r#"a & b < c > d "e" 'f'"#),
            "a &amp; b &lt; c &gt; d &quot;e&quot; &#39;f&#39;"
        );
        assert_eq!(
            escape("mysql (no local queue) · 300 sold"),
            "mysql (no local queue) · 300 sold"
        );
    }
}
