-- The `redis-degrade` strategy's shared mode (src/lock/lock_mode.rs): which lock every
-- instance uses now, Redis or the MySQL version lock, and each instance's lease on it.
--
-- One row per degrading lock. `epoch` goes up by one at every switch, and is the
-- fencing token's epoch, so every grant after a switch outranks every grant before it.
CREATE TABLE IF NOT EXISTS seckill_lock_modes (
    name        VARCHAR(191)    NOT NULL,
    -- 'redis' or 'mysql'.
    mode        VARCHAR(16)     NOT NULL,
    epoch       BIGINT UNSIGNED NOT NULL,
    -- No grant in this epoch before this instant: by then every lease on the previous
    -- epoch has ended, so no holder of the previous mode is left.
    grants_from DATETIME(3)     NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;

-- Each instance's lease on the mode: it may grant in `epoch`'s mode until `expires_at`.
-- A switch stops every renewal of the old epoch, and waits until the last one ends.
CREATE TABLE IF NOT EXISTS seckill_lock_mode_leases (
    instance   VARCHAR(191)    NOT NULL,
    name       VARCHAR(191)    NOT NULL,
    epoch      BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(3)     NOT NULL,
    PRIMARY KEY (instance),
    KEY seckill_lock_mode_leases_epoch (name, epoch)
) ENGINE = InnoDB;
