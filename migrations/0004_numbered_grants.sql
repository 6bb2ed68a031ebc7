-- The `mysql` lock's grants number themselves (src/lock/mysql.rs, step 1): the INSERT
-- that takes the lock also takes its fencing token, the row's AUTO_INCREMENT id. A
-- grant is one statement instead of three (insert the row, raise the name's counter in
-- seckill_lock_fences, stamp the counter on the row), two fewer durable writes on every
-- hand-over.
--
-- AUTO_INCREMENT only grows, across deleted rows and (on MariaDB 10.2.4+ and MySQL 8)
-- server restarts, so a later grant of a name always has a larger id. These tokens
-- are epoch 1; the counters' tokens were epoch 0, so every new token outranks every
-- old one at the stock's fence. The stamped `fencing_token` column goes; instances of
-- an older build must be stopped first (they stamp it). seckill_lock_fences stays,
-- unused by the lock: its counters are where the epoch-0 tokens came from.
ALTER TABLE seckill_locks
    DROP COLUMN fencing_token,
    ADD COLUMN grant_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    ADD UNIQUE KEY seckill_locks_grant (grant_id);
