-- The `mysql` lock hands a held row to the next buyer of the same instance in one
-- UPDATE (src/lock/mysql.rs, step 6): the release and the next grant in one durable
-- write instead of a DELETE and an INSERT. An UPDATE takes no new AUTO_INCREMENT id,
-- so the row counts its hand-overs, and a grant's fencing token is
-- `grant_id * 1000 + hand_overs` (epoch 2): a hand-over outranks the grant it came
-- from, and the next row's id outranks every hand-over of the last. Existing rows
-- start at 0, which is what they are.
ALTER TABLE seckill_locks
    ADD COLUMN hand_overs INT UNSIGNED NOT NULL DEFAULT 0;
