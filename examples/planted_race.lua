-- examples/planted_race.lua: a race that seeded schedules find (smarm.test, opts.seeds).
-- An account actor answers "get" and "set"; two depositors each read the balance, then write
-- it back plus their deposit; the second first has an audit actor note that it is about to.
-- Whether a deposit is lost depends on how the requests interleave: first come, first served
-- runs the first deposit's write before the second's read (the audit's round trip is as long
-- as the first's read), so a plain test passes, while some seeded schedules answer the audit
-- sooner, run both reads before either write, and lose a deposit. spec/seed_spec.lua
-- checks that some seeds fail and others pass, each the same on every run.
-- Run: build/lua-release/smarm -n examples/planted_race.lua [seeds]
-- (with examples/?.lua on LUA_PATH when required from elsewhere)
local smarm = require("smarm")

local race = {}

local function account(balance)
  while true do
    local m = smarm.receive()
    if m.op == "get" then
      smarm.send(m.from, balance)
    elseif m.op == "set" then
      balance = m.value
      smarm.send(m.from, "ok")
    end
  end
end

local function audit()
  while true do
    local m = smarm.receive()
    smarm.send(m.from, "noted")
  end
end

-- The planted race: a read-modify-write in two messages, with nothing held in between.
local function deposit(acct, amount, auditor)
  local me = smarm.self()
  if auditor then
    smarm.send(auditor, { from = me })
    assert(smarm.receive() == "noted")
  end
  smarm.send(acct, { op = "get", from = me })
  local balance = smarm.receive()
  smarm.send(acct, { op = "set", value = balance + amount, from = me })
  assert(smarm.receive() == "ok")
end

-- Two deposits of 10 onto 100, each by its own actor; returns the balance after both.
function race.two_deposits()
  local acct, auditor = smarm.spawn(account, 100), smarm.spawn(audit)
  local me = smarm.self()
  for i = 1, 2 do
    smarm.spawn(function() deposit(acct, 10, i == 2 and auditor); smarm.send(me, "deposited") end)
  end
  for _ = 1, 2 do smarm.receive(function(m) return m == "deposited" end) end
  smarm.send(acct, { op = "get", from = me })
  return smarm.receive()
end

-- As a script: the test under the plain schedule, then under seeds 1..N (default 20).
if ... ~= "planted_race" then -- run as a script, not required
  local test = require("smarm.test")
  local function the_test() assert(race.two_deposits() == 120, "a deposit was lost") end
  print("first come, first served:", pcall(test.run, the_test) and "passes" or "fails")
  local n = tonumber(arg and arg[1]) or 20
  for seed = 1, n do
    print(string.format("seed %2d: %s", seed, pcall(test.run, the_test, { seed = seed })
      and "passes" or "fails (a deposit lost)"))
  end
  local ok, err = pcall(test.run, the_test, { seeds = n })
  print(ok and "opts.seeds: the test passed every seed" or "opts.seeds: the test fails:\n" .. tostring(err))
end

return race
