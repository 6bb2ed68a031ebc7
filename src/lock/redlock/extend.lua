-- Extend the key only if it still holds our value. KEYS[1] = key; ARGV[1] = value, ARGV[2] = ttl in ms.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
