-- Delete the key only if it still holds our value. KEYS[1] = key; ARGV[1] = value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
