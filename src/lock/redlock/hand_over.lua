-- Step 6: give the key to the next owner only if it still holds our value, with a
-- full lease. KEYS[1] = key; ARGV[1] = our value, ARGV[2] = the next value, ARGV[3] = ttl in ms.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
