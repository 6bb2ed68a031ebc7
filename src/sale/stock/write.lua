-- Fenced write. KEYS = the segment's stock, lucky, sales, outcomes, the segment's
-- high-water mark, refusals, `stock` (the units left in every segment), the buyers
-- who got a unit (Keys::buyers, src/sale/keys.rs), the orders stream (Keys::orders) and the sale's
-- name. `ARGV[1]` = sale id, `ARGV[2]` = the segment's new stock, `ARGV[3]` = the sale
-- record as JSON, `ARGV[4]` = the buyer to hold to one unit (empty: no such check),
-- `ARGV[5]` = `1` to append the sale to the orders stream (empty: no orders), `ARGV[6]` =
-- the name of the sale the read saw, `ARGV[7]`, `ARGV[8]` = the holder's token (absent
-- when unfenced). The sale must still have that name, and the mark must still
-- be this token and this sale's read. A segment of a split stock takes its unit from
-- `stock` too, in the same script, so `stock + lucky` stays the initial stock.
-- Returns `sold`, `reset` (a reset began a new sale since the read), `fenced` (another
-- holder read since), `aborted` (the seller gave up on this id) or `repeat` (the buyer
-- already got a unit of this sale).
if (redis.call('GET', KEYS[10]) or '') ~= ARGV[6] then return 'reset' end
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then return 'aborted' end
if ARGV[7] then
  local seen = redis.call('HMGET', KEYS[5], 'epoch', 'counter', 'sale')
  local still_this_reads_mark = seen[1] == ARGV[7] and seen[2] == ARGV[8] and seen[3] == ARGV[1]
  if not still_this_reads_mark then redis.call('HINCRBY', KEYS[6], 'write', 1) return 'fenced' end -- break-it: fence
end
if ARGV[4] ~= '' and redis.call('SADD', KEYS[8], ARGV[4]) == 0 then return 'repeat' end
redis.call('HSET', KEYS[4], ARGV[1], 'sold:' .. ARGV[2])
redis.call('SET', KEYS[1], ARGV[2])
if KEYS[7] ~= KEYS[1] then redis.call('DECR', KEYS[7]) end
redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[3], ARGV[3])
if ARGV[5] ~= '' then
  redis.call('XADD', KEYS[9], '*', 'sale', redis.call('GET', KEYS[10]) or '', 'record', ARGV[3])
end
return 'sold'
