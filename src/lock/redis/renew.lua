-- Extend the lease only if it is still ours. KEYS[1] = lock key; ARGV[1] = token, ARGV[2] = ttl in ms.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2]) -- break-it: renewal
return 1
