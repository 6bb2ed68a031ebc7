-- Delete the key only if it is still ours, then tell the waiters.
-- KEYS[1] = lock key; ARGV[1] = token, ARGV[2] = release channel.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end -- break-it: owner-check
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
