-- Step 8: give the key to the next token if it still holds ours, and hand out that
-- grant's fencing token. `{-2, 0}`: not ours any more; `{-1, 0}`: no epoch, nothing
-- changed. KEYS as the acquire's; ARGV[1] = our token, ARGV[2] = the next one, ARGV[3] = ttl in ms.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-2, 0} end -- break-it: hand-over-check
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  return {-1, 0}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {tonumber(epoch), redis.call('INCR', KEYS[2])}
