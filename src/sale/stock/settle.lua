-- Settle a sale whose write went unanswered. `KEYS[1]` = outcomes, `KEYS[2]` = the
-- sale's name; `ARGV[1]` = sale id, `ARGV[2]` = the name of the sale its read saw.
-- Returns the outcome that stands (`sold:<stock after>` or `aborted`), and records
-- `aborted` if there is none yet. Returns `reset`, and records nothing, when no outcome
-- is there and a reset renamed the sale since: the outcomes are gone, and the write may
-- have run before it.
local outcome = redis.call('HGET', KEYS[1], ARGV[1])
if outcome then return outcome end
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[2] then return 'reset' end
redis.call('HSET', KEYS[1], ARGV[1], 'aborted')
return 'aborted'
