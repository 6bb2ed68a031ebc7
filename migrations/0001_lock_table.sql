-- The `mysql` strategy's lock table (src/lock/mysql.rs): one row per held lock.
--
-- The primary key on `name` is the lock: a second INSERT for a held name fails with a
-- duplicate-key error, which the lock reads as "held". All times are the server's
-- clock (NOW(3)), so clients with different clocks agree on when a row has expired.
CREATE TABLE IF NOT EXISTS seckill_locks (
    name          VARCHAR(191)    NOT NULL,
    -- Who holds it: one owner id per sale (or per caller that re-enters).
    owner         VARCHAR(191)    NOT NULL,
    -- How many times the owner has taken it without releasing: reentrancy.
    hold_count    INT UNSIGNED    NOT NULL,
    -- After this instant the holder is presumed dead and the row may be taken over.
    expires_at    DATETIME(3)     NOT NULL,
    -- The grant's fencing token, from seckill_lock_fences.
    fencing_token BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (name),
    KEY seckill_locks_expiry (expires_at)
) ENGINE = InnoDB;

-- One counter per lock name that only ever grows, even when the lock's row is deleted
-- and inserted again: where the fencing tokens come from.
CREATE TABLE IF NOT EXISTS seckill_lock_fences (
    name    VARCHAR(191)    NOT NULL,
    counter BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;
