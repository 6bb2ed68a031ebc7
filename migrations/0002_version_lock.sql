-- The `mysql-version` strategy's table (src/lock/mysql_version.rs): optimistic locking
-- with a version column, one row per lock name, kept for ever.
--
-- Nobody holds a row lock while waiting. A taker reads the row, then changes it with
-- one compare-and-set: `UPDATE ... WHERE name = ? AND version = ?` plus "free or
-- expired". One affected row is a grant; zero means someone changed the row since it
-- was read (a version conflict), and the taker reads again.
CREATE TABLE IF NOT EXISTS seckill_version_locks (
    name       VARCHAR(191)    NOT NULL,
    -- Raised by one at every grant, never lowered: the grant's fencing token.
    version    BIGINT UNSIGNED NOT NULL,
    -- Who holds it; the empty string when nobody does.
    owner      VARCHAR(191)    NOT NULL,
    -- After this instant the holder is presumed dead and the row may be taken.
    expires_at DATETIME(3)     NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;
