//! What a reader sees: the comparison chart and the HTML report.

pub mod chart;
pub mod html;
