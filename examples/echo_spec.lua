-- examples/echo_spec.lua: the README's example of a spec of actors (spec/test_spec.lua runs it).
-- Run: build/lua-release/smarm test examples/echo_spec.lua
local smarm = require("smarm")
local test = require("smarm.test")

describe("an echo actor", function()
  it("answers, on another scheduler, and never crashes", function()
    test.run(function()
      local echo = smarm.spawn_on(2, function()
        local m = smarm.receive()
        smarm.send(m.from, m.text)
      end)
      smarm.send(echo, { from = smarm.self(), text = "hi" })
      test.expect_message("hi")
    end, { schedulers = 2 })
  end)

  it("keeps its hour-long retry schedule, in simulated time", function()
    test.run(function()
      local start = smarm.now()
      for _ = 1, 60 do smarm.sleep(60) end -- a retry a minute
      assert(smarm.now() - start == 3600)
    end, { clock = "virtual", timeout = 7200 })
  end)
end)
