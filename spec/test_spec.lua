-- smarm.test (lua/smarm/test.lua): test.run and the message helpers. The cases that must make a
-- test fail are run in a nested busted (spec/fixtures/smarm_test_suite.lua, one case per kind
-- of failure) whose JSON report is read back here; the rest run in this process.
local smarm = require "smarm"
local test = require "smarm.test"
local guard = dofile("spec/support/guard.lua")

local exe = os.getenv("SMARM_EXE")
local have_json, json = pcall(require, "dkjson")

-- The nested busted's report: name -> { status =, message = }.
local function run_fixture()
  local out = assert(io.popen(exe .. " test -o json spec/fixtures/smarm_test_suite.lua 2>&1"))
  local text = out:read("*a")
  out:close()
  local report = json.decode(text:match("{.*}") or "")
  assert.is_table(report, "no JSON report from the nested busted:\n" .. text)
  local by_name = {}
  for status, list in pairs({ success = report.successes, failure = report.failures,
                               error = report.errors, pending = report.pendings }) do
    for _, t in ipairs(list) do
      by_name[t.name:gsub("^smarm%.test ", "")] = { status = status, message = t.message or "" }
    end
  end
  return by_name
end

describe("smarm.test in a nested busted", function()
  if not exe or not have_json or not package.loaded.busted then
    pending("needs busted, dkjson and SMARM_EXE (the native spec runs)")
    return
  end
  local r
  local function case(name)
    r = r or run_fixture()
    return assert(r[name], "the nested busted did not report '" .. name .. "'")
  end

  it("passes a test whose actors all end well, with its results", function()
    assert.equals("success", case("pass: a round trip, results returned").status)
  end)

  it("reports an assert in the test's actor as busted's failure, message and traceback", function()
    local c = case("failure: an assert in the test's own actor")
    assert.equals("failure", c.status)
    assert.matches("Expected objects to be equal", c.message, 1, true)
    assert.matches("smarm_test_suite.lua:19", c.message, 1, true)
    assert.matches("stack traceback:", c.message, 1, true)
  end)

  it("fails on an assert in an actor on another scheduler, with its traceback", function()
    local c = case("failure: an assert in an actor on another scheduler")
    assert.equals("failure", c.status)
    assert.matches("one is not two on scheduler 2", c.message, 1, true)
    assert.matches("smarm_test_suite.lua:27: in function", c.message, 1, true)
  end)

  it("fails on a crash nothing hears of, unless allowed or heard by a monitor", function()
    local c = case("failure: a crash nothing hears of, on the test's scheduler")
    assert.equals("failure", c.status)
    assert.matches("local crash", c.message, 1, true)
    assert.matches("smarm_test_suite.lua:34: smarm.test: 1 actor crashed", c.message, 1, true)
    assert.equals("success", case("pass: a crash allowed by allow_crashes").status)
    assert.equals("success", case("pass: a crash a monitor hears of").status)
  end)

  it("fails a test that outlives its timeout, with every live actor's traceback", function()
    local c = case("failure: a timeout names every live actor")
    assert.equals("failure", c.status)
    assert.matches("did not end within 0.2 s", c.message, 1, true)
    assert.matches("smarm_test_suite.lua:59: in function", c.message, 1, true) -- on scheduler 2
    assert.matches("smarm_test_suite.lua:60: in function", c.message, 1, true) -- the test's own
  end)

  it("fails when the test's actor is killed", function()
    local c = case("failure: the test's actor killed")
    assert.equals("failure", c.status)
    assert.matches('reason "killed"', c.message, 1, true)
  end)

  it("fails expect_message and expect_no_message at the test's line", function()
    local c = case("failure: expect_message with nothing coming")
    assert.equals("failure", c.status)
    assert.matches('smarm_test_suite.lua:69: smarm.test: no message matching "never"', c.message, 1, true)
    c = case("failure: expect_no_message with one coming")
    assert.equals("failure", c.status)
    assert.matches('came: { kind = "unwanted" }', c.message, 1, true)
  end)

  it("leaves a table error value to busted as an error", function()
    local c = case("error: a table raised stays itself")
    assert.equals("error", c.status)
    assert.matches("code 7", c.message, 1, true)
  end)
end)

describe("the README's example spec", function()
  if not exe or not have_json or not package.loaded.busted then
    pending("needs busted, dkjson and SMARM_EXE (the native spec runs)")
    return
  end
  it("passes under smarm test", function()
    local out = assert(io.popen(exe .. " test -o json examples/echo_spec.lua 2>&1"))
    local text = out:read("*a")
    out:close()
    local report = json.decode(text:match("{.*}") or "")
    assert.is_table(report, text)
    assert.equals(2, #report.successes, text)
    assert.equals(0, #report.failures + #report.errors, text)
  end)
end)

describe("smarm.test.run", function()
  it("returns the test function's results", function()
    local a, b, c = test.run(function(...) return 1, nil, select("#", ...) end)
    assert.equals(1, a)
    assert.is_nil(b)
    assert.equals(0, c)
  end)

  it("raises a table error value as the same table", function()
    local t = { code = 7 }
    local ok, e = pcall(test.run, function() error(t) end)
    assert.is_false(ok)
    assert.equals(t, e)
  end)

  it("adds the actor's traceback to a string error", function()
    local ok, e = pcall(test.run, function() error("plain failure") end)
    assert.is_false(ok)
    assert.matches("plain failure\nstack traceback:", e, 1, true)
    assert.matches("test_spec.lua", e, 1, true)
  end)

  it("passes the run's options on and refuses its own misuse", function()
    assert.equals(3, test.run(function() return smarm.schedulers() end, { schedulers = 3 }))
    assert.has_error(function() test.run(42) end,
      "bad argument #1 to 'run' (function expected, got number)")
    assert.has_error(function() test.run(function() end, { timeout = 0 }) end,
      "smarm.test.run: opts.timeout must be a positive number of seconds")
    assert.has_error(function() test.run(function() end, { on_crash = print }) end,
      "smarm.test.run: opts.on_crash is test.run's own (use allow_crashes, or a monitor)")
  end)

  it("passes a test whose actor ends by smarm.exit(), with no results", function()
    assert.equals(0, select("#", test.run(function() smarm.exit() end)))
  end)

  it("counts every crash of a burst, whatever the run's max_mailbox", function()
    local ok, e = pcall(test.run, function()
      for i = 1, 3 do smarm.spawn(function() error("boom " .. i) end) end
      smarm.yield() -- the three crash, one after the other, before the collector runs
    end, { schedulers = 1, slice = math.huge, max_mailbox = 2 })
    assert.is_false(ok)
    assert.matches("3 actors crashed", tostring(e), 1, true)
  end)

  it("fails, and does not hang, when the test kills its crash collector", function()
    local ok, e = pcall(test.run, function()
      for _, pid in ipairs(smarm.processes()) do
        if pid ~= smarm.self() and smarm.info(pid, "waiting").waiting == "receive" then
          smarm.kill(pid) -- the collector (the run's main actor waits for a DOWN: "receive" too)
        end
      end
    end)
    assert.is_false(ok)
    assert.matches("test.run's", tostring(e), 1, true)
  end)

  it("fails as a timeout, naming what it can, when a scheduler is stuck in C code", function()
    -- Scheduler 2 is held in C (usleep, in a slice that never ends) until the run's end asks
    -- its actor to give way, so the request for its actors' tracebacks cannot be answered on
    -- any machine. Before the hold come scheduler 2's start (guard.started) and that actor's
    -- first run: opts.timeout leaves seconds for them, a cost this failing test pays once.
    local ok, e = pcall(test.run, function()
      local me = smarm.self()
      guard.started()
      smarm.spawn_opt({ on = 2, slice = math.huge }, function() -- never switched out
        local ffi = require("ffi")
        pcall(ffi.cdef, "int usleep(unsigned int usec);")
        smarm.send(me, "stuck")
        while true do ffi.C.usleep(10000) end
      end)
      smarm.receive(function(m) return m == "stuck" end)
      smarm.receive(function(m) return m == "never" end)
    end, { schedulers = 2, timeout = 2, request_timeout = 0.2, watchdog = math.huge })
    assert.is_false(ok)
    assert.matches("did not end within 2 s", tostring(e), 1, true)
    assert.matches("not every scheduler answered", tostring(e), 1, true)
    assert.matches("test_spec.lua:%d+: in function", tostring(e)) -- the test's actor is named
  end)

  it("counts its timeout on the virtual clock: a deadlock fails at once, a long simulation passes",
    function()
      local ok, e = pcall(test.run, function() smarm.receive() end, { clock = "virtual" })
      assert.is_false(ok)
      assert.matches("did not end within 10 s (opts.timeout, on the virtual clock)", tostring(e), 1, true)
      assert.equals(3600, test.run(function() smarm.sleep(3600); return smarm.now() end,
        { clock = "virtual", timeout = 7200 }))
    end)

  it("matches messages by function, by table fields or by value", function()
    test.run(function()
      local me = smarm.self()
      smarm.send(me, { kind = "a", n = 1 })
      smarm.send(me, 5)
      smarm.send(me, "text")
      assert.equals("text", test.expect_message("text"))
      assert.equals(5, test.expect_message(function(m) return m == 5 end))
      assert.equals(1, test.expect_message({ kind = "a" }).n)
      test.expect_no_message(function() return true end, 0)
    end)
  end)
end)
