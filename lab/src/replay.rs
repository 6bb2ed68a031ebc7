//! Replay: a past crowd's `history.jsonl`, opened in the page and stepped through one
//! event at a time. Each step is drawn on the axis of the whole run, with the checks of
//! what happened so far (those that need only the history, as `loadtest check` runs
//! them), so a learner sees the moment a check starts to fail.

use loadtest::history::{self, checks};
use loadtest::render::timeline;

use crate::crowd::STOCK;

/// The timeline of the first `upto` events of the history in `text` (all of them
/// without `upto`), or why `text` is not a history.
pub fn page(text: &str, upto: Option<usize>) -> Result<String, String> {
    let events = history::parse(text, "the history").map_err(|error| format!("{error:#}"))?;
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Err("the history is empty: open a crowd's history.jsonl".to_owned());
    };
    let shown = &events[..upto.unwrap_or(events.len()).min(events.len())];
    // The lab's crowd: 300 units in one segment, any number per buyer.
    let checked = checks::run_on_history_alone(shown, &[STOCK], false);
    let title = format!("replay: {} of {} events", shown.len(), events.len());
    Ok(timeline::page_of_part(&title, shown, &checked, first.at_us, last.at_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_BUYERS_OF_ONE_UNIT: &str = r#"{"at_us":10,"process":0,"type":"invoke","host":"http://127.0.0.1:8080"}
{"at_us":20,"process":1,"type":"invoke","host":"http://127.0.0.1:8090"}
{"at_us":30,"process":1,"type":"ok","instance":"seckill-8090","sold_unit":{"sale":"s","segment":0,"unit":300,"sale_id":"b"}}
{"at_us":90,"process":0,"type":"ok","instance":"seckill-8080","sold_unit":{"sale":"s","segment":0,"unit":300,"sale_id":"a"}}
"#;

    #[test]
    fn a_step_shows_the_checks_of_what_happened_so_far() {
        let before = page(TWO_BUYERS_OF_ONE_UNIT, Some(3)).unwrap();
        assert!(before.contains("replay: 3 of 4 events"), "{before}");
        assert!(
            !before.contains("class=\"request violation"),
            "one sale so far breaks nothing"
        );
        let after = page(TWO_BUYERS_OF_ONE_UNIT, None).unwrap();
        assert!(after.contains("replay: 4 of 4 events"));
        assert!(
            after.contains("class=\"request violation"),
            "the second sale of unit 300 fails unique"
        );
    }

    #[test]
    fn a_file_that_is_not_a_history_is_named_by_its_line() {
        let error = page("{\"at_us\":1}\nnot json\n", None).unwrap_err();
        assert!(
            error.contains("the history line 1: not an event of a history"),
            "{error}"
        );
        assert!(page("\n", None).unwrap_err().contains("empty"));
    }
}
