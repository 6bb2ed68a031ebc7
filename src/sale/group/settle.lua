-- Settles a group whose write went unanswered. `KEYS[1]` = outcomes, `KEYS[2]` = the
-- sale's name; `ARGV[1]` = the group's id, `ARGV[2]` = the name its read saw, then each
-- buyer's sale id. Returns `{'written', outcome...}` when the write ran, `{'aborted'}`
-- after recording it so when it did not (a late write is then refused), or `{'reset'}`,
-- recording nothing, when a reset renamed the sale since and took the outcomes with it.
local outcome = redis.call('HGET', KEYS[1], ARGV[1])
if outcome == 'written' then
  local answers = {'written'}
  for i = 3, #ARGV do answers[#answers + 1] = redis.call('HGET', KEYS[1], ARGV[i]) or 'out' end
  return answers
end
if outcome then return {outcome} end
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[2] then return {'reset'} end
redis.call('HSET', KEYS[1], ARGV[1], 'aborted')
return {'aborted'}
