//! The break-it exercises: a student deletes one marked line of the lock or the sale,
//! predicts which rows of the suite will fail, and `make grade` runs the rows on the
//! student's tree and says which broke and which held. The suite is the grader, as in
//! MIT 6.824's labs; docs/teach/break-it.md is the students' page.
//!
//! Each line a student may delete carries a comment `break-it: NAME`, and is written
//! so that the code still compiles without it: the check is gone, nothing else.

use std::path::Path;

/// One line to delete, and the rows of the suite that must fail without it.
pub struct Exercise {
    /// The name in the line's `break-it:` comment.
    pub name: &'static str,
    /// The file that holds the line, from the project's root.
    pub file: &'static str,
    /// What the line does, in a few words.
    pub what_it_does: &'static str,
    /// The rows (their [`Row::name`]) that fail once the line is gone: the answer key.
    pub breaks: &'static [&'static str],
}

/// One test of the `it` binary that the grade runs, with a short name for the table.
pub struct Row {
    pub name: &'static str,
    /// The test's full path in `cargo test -p seckill --test it -- --list`.
    pub test: &'static str,
}

pub const EXERCISES: &[Exercise] = &[
    Exercise {
        name: "owner-check",
        file: "src/lock/redis/release.lua",
        what_it_does: "a release deletes the lock key only while it still holds our token",
        breaks: &["stale release", "release by a stranger", "expiry without renewal"],
    },
    Exercise {
        name: "renewal",
        file: "src/lock/redis/renew.lua",
        what_it_does: "a renewal pushes the key's expiry on",
        breaks: &["renewal"],
    },
    Exercise {
        name: "hand-over-check",
        file: "src/lock/redis/hand_over.lua",
        what_it_does: "a hand-over gives the key to the waiter only while it still holds our token",
        breaks: &["hand-over after a takeover"],
    },
    Exercise {
        name: "fence",
        file: "src/sale/stock/write.lua",
        what_it_does: "the stock refuses a write whose token is no longer the newest read",
        breaks: &["two fenced holders", "paused holder, fenced"],
    },
];

/// Every row the grade runs, each exercise's and a few that should hold whatever the
/// student deletes, so that a prediction has something to be wrong about.
pub const ROWS: &[Row] = &[
    Row {
        name: "stale release",
        test: "lock::redis::release_is_refused_once_the_lease_expired_and_another_owner_holds_the_key",
    },
    Row {
        name: "release by a stranger",
        test: "lock::redis::release_leaves_a_key_alone_when_its_token_is_someone_elses",
    },
    Row {
        name: "renewal",
        test: "lock::redis::renewal_keeps_a_live_holders_lock_well_past_its_ttl",
    },
    Row {
        name: "expiry without renewal",
        test: "lock::redis::without_renewal_a_slow_holder_loses_its_lock_after_the_ttl",
    },
    Row {
        name: "hand-over",
        test: "lock::redis::a_hand_over_gives_the_key_to_the_next_owner_with_the_next_token",
    },
    Row {
        name: "hand-over after a takeover",
        test: "lock::redis::a_hand_over_of_a_key_someone_took_over_changes_nothing_and_says_lost",
    },
    Row {
        name: "mutual exclusion",
        test: "lock::conformance::redis::concurrent_read_modify_writes_under_the_lock_lose_no_update",
    },
    Row {
        name: "two fenced holders",
        test: "sale::fencing::two_fenced_holders_never_sell_one_unit_twice_in_any_order",
    },
    Row {
        name: "paused holder, fenced",
        test: "chaos::pauses::a_holder_paused_past_its_lease_is_refused_by_the_fenced_stock",
    },
    Row {
        name: "paused holder, unfenced",
        test: "chaos::pauses::without_fencing_a_holder_paused_past_its_lease_sells_a_unit_twice",
    },
];

impl Exercise {
    /// The comment that marks the exercise's line.
    pub fn marker(&self) -> String {
        format!("break-it: {}", self.name)
    }

    /// Whether `tree`'s copy of the file still holds the marked line.
    pub fn line_is_there(&self, tree: &Path) -> std::io::Result<bool> {
        let source = std::fs::read_to_string(tree.join(self.file))?;
        Ok(source.lines().any(|line| self.marks(line)))
    }

    /// `tree`'s copy of the file with the marked line deleted (what a student does).
    pub fn delete_the_line(&self, tree: &Path) -> std::io::Result<()> {
        let path = tree.join(self.file);
        let source = std::fs::read_to_string(&path)?;
        let kept: Vec<&str> = source.lines().filter(|line| !self.marks(line)).collect();
        std::fs::write(&path, kept.join("\n") + "\n")
    }

    fn marks(&self, line: &str) -> bool {
        line.trim_end().ends_with(&self.marker())
    }
}

/// The row of this short name.
pub fn row(name: &str) -> Option<&'static Row> {
    ROWS.iter().find(|row| row.name == name)
}
