-- Store the epoch in ARGV[1] unless the one in KEYS[1] is as new: epochs only grow.
local current = tonumber(redis.call('GET', KEYS[1]))
if current == nil or current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
