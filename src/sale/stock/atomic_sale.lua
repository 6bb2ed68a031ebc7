-- The whole sale in one script. KEYS = stock, lucky, sales, outcomes, the segment count
-- of the last reset, the buyers who got a unit, the orders stream and the sale's name;
-- `ARGV[1]` = the sale record as JSON, which the script completes with `stock_before`;
-- `ARGV[2]` = sale id; `ARGV[3]` = the buyer to hold to one unit (empty: no such
-- check); `ARGV[4]` = `1` to append the sale to the orders stream (empty: no orders).
-- Returns `{code, the sale's name}`: the code is the stock it found, -1 when sold out,
-- -2 when the id was settled as aborted, -3 when the buyer already got a unit. The name
-- is what a later sale carries to its settle. A `NOTANUMBER` error when the stock is not a
-- number, a `SEGMENTS` error when the sale was split into segments (whose units `stock`
-- only counts: the locks that guard them would sell them again).
local segments = redis.call('GET', KEYS[5]) or '1'
if segments ~= '1' then return redis.error_reply('SEGMENTS ' .. segments) end
local name = redis.call('GET', KEYS[8]) or ''
if redis.call('HEXISTS', KEYS[4], ARGV[2]) == 1 then return {-2, name} end
local raw = redis.call('GET', KEYS[1]) or '0'
local stock = tonumber(raw)
if not stock then return redis.error_reply('NOTANUMBER ' .. raw) end
if stock <= 0 then return {-1, name} end
if ARGV[3] ~= '' and redis.call('SADD', KEYS[6], ARGV[3]) == 0 then return {-3, name} end
redis.call('HSET', KEYS[4], ARGV[2], 'sold:' .. (stock - 1))
redis.call('SET', KEYS[1], stock - 1)
redis.call('INCR', KEYS[2])
local record = cjson.decode(ARGV[1])
record['stock_before'] = stock
local json = cjson.encode(record)
redis.call('RPUSH', KEYS[3], json)
if ARGV[4] ~= '' then
  redis.call('XADD', KEYS[7], '*', 'sale', name, 'record', json)
end
return {stock, name}
