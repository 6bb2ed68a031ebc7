//! Every SQL statement of the lock, named, with its binds. The steps that run them are in
//! `attempt.rs` (steps 1 to 4), `grants.rs` (the renewal, the release, step 6) and `mod.rs`.

/// Step 1: the insert that is the lock, and numbers it (`grant_id`). Binds: name, owner, ttl in microseconds.
pub(super) const INSERT_ROW: &str = "INSERT INTO seckill_locks (name, owner, hold_count, expires_at) \
     VALUES (?, ?, 1, NOW(3) + INTERVAL ? MICROSECOND)";
/// Step 2: the owner re-enters its own live row. Binds: name, owner.
pub(super) const REENTER: &str = "UPDATE seckill_locks SET hold_count = hold_count + 1 \
     WHERE name = ? AND owner = ? AND expires_at > NOW(3)";
/// After a refused insert: who holds the row, whether it expired, its grant. Binds: name.
pub(super) const READ_HOLDER: &str = "SELECT owner, CAST(expires_at <= NOW(3) AS SIGNED), grant_id, hand_overs \
     FROM seckill_locks WHERE name = ?";
/// Step 3: clear an expired row, so that the taker can insert its own (step 1) for a new id: a holder that
/// vanished does not block forever. InnoDB locks the row and re-checks the condition, and the primary key
/// admits one insert, so two takers can never both win. Binds: name.
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM seckill_locks WHERE name = ? AND expires_at <= NOW(3)";
/// Step 3's renewal, every `ttl / 3` ([`crate::lock::parts::keepalive`]): only our own grant, only while it
/// has not expired. Binds: ttl in µs, name, owner, token.
pub(super) const RENEW: &str = "UPDATE seckill_locks SET expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND owner = ? AND grant_id = ? AND expires_at > NOW(3)";
/// Release of a hold that is not the last. Binds: name, owner, token.
pub(super) const RELEASE_ONE_HOLD: &str = "UPDATE seckill_locks SET hold_count = hold_count - 1 \
     WHERE name = ? AND owner = ? AND grant_id = ? AND hold_count > 1";
/// Release of the last hold. Binds: name, owner, token.
pub(super) const DELETE_LAST_HOLD: &str =
    "DELETE FROM seckill_locks WHERE name = ? AND owner = ? AND grant_id = ? AND hold_count = 1";
/// Shutdown: the row, whatever its hold count. Binds: name, owner, token.
pub(super) const DELETE_ROW: &str = "DELETE FROM seckill_locks WHERE name = ? AND owner = ? AND grant_id = ?";
/// Step 6: the release that grants the row to the next owner, one UPDATE on the last
/// hold of our own grant. Binds: the next owner, ttl in µs, name, owner, grant id.
pub(super) const HAND_OVER: &str = "UPDATE seckill_locks \
     SET owner = ?, hand_overs = hand_overs + 1, expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND owner = ? AND grant_id = ? AND hold_count = 1";
/// The sweeper: rows expired for a whole TTL already. Binds: ttl in microseconds.
pub(super) const SWEEP_EXPIRED: &str = "DELETE FROM seckill_locks WHERE expires_at < NOW(3) - INTERVAL ? MICROSECOND";
/// How the server hands out AUTO_INCREMENT ids (step 5). Binds: none.
pub(super) const READ_AUTOINC_LOCK_MODE: &str = "SELECT CAST(@@innodb_autoinc_lock_mode AS SIGNED)";
