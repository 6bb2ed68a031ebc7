-- Set the key only if absent, with a TTL; on success hand out the next fencing token,
-- `{epoch, counter}`. `{-1, 0}`: the counter has no epoch yet (step 1), nothing granted.
-- KEYS[1] = lock key, KEYS[2] = fencing counter, KEYS[3] = its epoch; ARGV[1] = token, ARGV[2] = ttl in ms.
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  return {-1, 0}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {tonumber(epoch), redis.call('INCR', KEYS[2])}
end
return {tonumber(epoch), 0}
