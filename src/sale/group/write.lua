-- The fenced write of a group. KEYS as the fenced write of one sale
-- (src/sale/stock/write.lua): the segment's stock, lucky, sales, outcomes,
-- high-water mark, refusals, `stock` (every segment's units), the buyers, the orders
-- stream and the sale's name. `ARGV[1]` = the group's sale id (its read's), `ARGV[2]` =
-- the stock the read saw, `ARGV[3]` = `1` to append orders (empty: no orders), `ARGV[4]` =
-- the sale's name the read saw, `ARGV[5]`, `ARGV[6]` = the holder's token (both empty
-- when unfenced), then three per buyer, oldest first: the buyer's sale id, the buyer to
-- hold to one unit (empty: no check), and the buyer's sale record as JSON without
-- `stock_before`, which the script puts first. The checks are the one-sale write's:
-- the sale's name, an id settled as aborted, the mark. Then each buyer in turn gets a
-- unit while any is left (`sold:<stock after>`), or `repeat` (a unit of this sale
-- already), or `out`. Returns `{'written', outcome...}`, or `{'reset'}`, `{'aborted'}`,
-- `{'fenced'}` with nothing written.
if (redis.call('GET', KEYS[10]) or '') ~= ARGV[4] then return {'reset'} end
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then return {'aborted'} end
if ARGV[5] ~= '' then
  local seen = redis.call('HMGET', KEYS[5], 'epoch', 'counter', 'sale')
  if seen[1] ~= ARGV[5] or seen[2] ~= ARGV[6] or seen[3] ~= ARGV[1] then
    redis.call('HINCRBY', KEYS[6], 'write', 1)
    return {'fenced'}
  end
end
local name = redis.call('GET', KEYS[10]) or ''
local stock = tonumber(ARGV[2])
local sold = 0
local answers = {'written'}
for i = 7, #ARGV, 3 do
  local id, buyer = ARGV[i], ARGV[i + 1]
  local outcome
  if stock <= 0 then
    if buyer ~= '' and redis.call('SISMEMBER', KEYS[8], buyer) == 1 then outcome = 'repeat' else outcome = 'out' end
  elseif buyer ~= '' and redis.call('SADD', KEYS[8], buyer) == 0 then
    outcome = 'repeat'
  else
    local record = '{"stock_before":' .. stock .. ',' .. string.sub(ARGV[i + 2], 2)
    redis.call('RPUSH', KEYS[3], record)
    if ARGV[3] ~= '' then redis.call('XADD', KEYS[9], '*', 'sale', name, 'record', record) end
    stock = stock - 1
    sold = sold + 1
    outcome = 'sold:' .. stock
  end
  redis.call('HSET', KEYS[4], id, outcome)
  answers[#answers + 1] = outcome
end
if sold > 0 then
  redis.call('SET', KEYS[1], stock)
  if KEYS[7] ~= KEYS[1] then redis.call('DECRBY', KEYS[7], sold) end
  redis.call('INCRBY', KEYS[2], sold)
end
redis.call('HSET', KEYS[4], ARGV[1], 'written')
return answers
