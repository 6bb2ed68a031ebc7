-- Fenced read. `KEYS[1]` = the segment's stock, `KEYS[2]` = its high-water mark,
-- `KEYS[3]` = refusals, `KEYS[4]` = the segment count of the last reset, `KEYS[5]` =
-- the sale's name, `KEYS[6]` = the segment's buyers.
-- `ARGV[1]` = the segment count the seller sells from; `ARGV[2]` = a buyer to refuse if
-- they got a unit of this segment already (empty: no such check; on a cluster, see
-- src/sale/buyers.rs); `ARGV[3]`, `ARGV[4]` = the holder's token (epoch,
-- counter), `ARGV[5]` = the sale id; no more ARGV for an unfenced read. The mark remembers the newest token and the one sale
-- that read with it: a second sale with the same token is refused, because two grants
-- that carry one token (a counter that started over, a failover) cannot both be the
-- newest holder. Returns `{'ok', stock, the sale's name}`, `{'fenced', newest token seen}`,
-- `{'segments', the count of the last reset}` when the seller splits the stock otherwise,
-- or `{'repeat'}` when the buyer got a unit here already.
local segments = redis.call('GET', KEYS[4]) or '1'
if segments ~= ARGV[1] then return {'segments', segments} end
if ARGV[3] then
  local seen = redis.call('HMGET', KEYS[2], 'epoch', 'counter', 'sale')
  local epoch, counter = tonumber(ARGV[3]), tonumber(ARGV[4])
  local seen_epoch, seen_counter = tonumber(seen[1]) or -1, tonumber(seen[2]) or -1
  local older = epoch < seen_epoch or (epoch == seen_epoch and counter < seen_counter)
  local tie = epoch == seen_epoch and counter == seen_counter and seen[3] and seen[3] ~= ARGV[5]
  if older or tie then
    redis.call('HINCRBY', KEYS[3], 'read', 1)
    return {'fenced', seen[1] .. '.' .. seen[2]}
  end
  redis.call('HSET', KEYS[2], 'epoch', ARGV[3], 'counter', ARGV[4], 'sale', ARGV[5])
end
if ARGV[2] ~= '' and redis.call('SISMEMBER', KEYS[6], ARGV[2]) == 1 then return {'repeat'} end
return {'ok', redis.call('GET', KEYS[1]) or '0', redis.call('GET', KEYS[5]) or ''}
