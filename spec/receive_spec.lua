-- Selective receive when the match function itself receives, nil matches with timeouts, long
-- backlogs (issue 9's repros: each failed before the saved queue kept stable slots).
local smarm = require("smarm")

local WAIT = 60 -- a hang guard in seconds, never a time budget

local function send_all(...)
  for _, v in ipairs({ ... }) do smarm.send(smarm.self(), v) end
end

describe("a match function that receives", function()
  it("lets the outer receive see what the inner one set aside", function()
    local got, rest = smarm.run(function()
      send_all("x1", "target", "ping")
      local inner
      local m = smarm.receive(function(v)
        if v == "x1" then inner = smarm.receive(function(y) return y == "ping" end, WAIT) end
        return v == "target"
      end, WAIT)
      return { m, inner }, { smarm.receive(0) }
    end)
    assert.are.same({ "target", "ping" }, got)
    assert.are.same({ "x1" }, rest) -- refused by the outer match, still there, nothing lost
  end)

  it("skips a message the inner receive took, and loses none", function()
    local got = smarm.run(function()
      send_all("a", "b", "c", "d")
      local inner = {}
      local m = smarm.receive(function(v)
        if #inner < 2 then inner[#inner + 1] = smarm.receive(0) end -- takes the oldest
        return v == "b" or v == "d"
      end, WAIT)
      local left = {}
      for v in function() return (smarm.receive(0)) end do left[#left + 1] = v end
      return { m = m, inner = inner, left = left }
    end)
    -- "a" and "b" went to the inner receives; the outer accepted "d" (it saw "b" taken)
    assert.are.same({ "a", "b" }, got.inner)
    assert.are.equal("d", got.m)
    assert.are.same({ "c" }, got.left)
  end)

  it("may make a call", function()
    local r = smarm.run(function()
      local server = smarm.spawn_on(2, function()
        while true do
          local m = smarm.receive()
          smarm.reply(m.from, m.request + 1)
        end
      end)
      send_all(1, 2, 3)
      return smarm.receive(function(v) return smarm.call(server, v) == 3 end, WAIT)
    end, { schedulers = 2 })
    assert.are.equal(2, r)
  end)
end)

describe("receive's arguments", function()
  it("a nil match with a timeout honours the timeout", function()
    local a, b = smarm.run(function() return smarm.receive(nil, 0.01) end)
    assert.is_nil(a)
    assert.are.equal("timeout", b)
    local v = smarm.run(function()
      smarm.send(smarm.self(), "now")
      return smarm.receive(nil, WAIT)
    end)
    assert.are.equal("now", v)
  end)

  it("rejects a match that is not a function", function()
    smarm.run(function()
      assert.has_error(function() smarm.receive({}, 1) end)
      assert.has_error(function() smarm.receive("soon") end)
    end)
  end)
end)

describe("a long backlog", function()
  it("keeps its order through many takes from the middle", function()
    local ok = smarm.run(function()
      local n = 4000
      for i = 1, n do smarm.send(smarm.self(), i) end
      -- take every fifth message selectively, from the middle of what is set aside
      for i = 5, n, 5 do
        assert(smarm.receive(function(v) return v == i end, WAIT) == i)
      end
      for i = 1, n do
        if i % 5 ~= 0 then
          local v = smarm.receive(0)
          if v ~= i then return false, ("expected %d, got %s"):format(i, tostring(v)) end
        end
      end
      return smarm.receive(0) == nil
    end)
    assert.is_true(ok)
  end)
end)

describe("the path an unsendable value's error names", function()
  local function err(v)
    return smarm.run(function()
      local ok, e = pcall(smarm.send, smarm.self(), v)
      assert(not ok)
      return e
    end)
  end

  it("names every kind of key that cannot travel the same way", function()
    assert.matches("message has a key that is a userdata$", err({ [newproxy()] = 1 }))
    assert.matches("message%.t has a key that is a userdata$", err({ t = { [newproxy()] = 1 } }))
    assert.matches("message has a key that is a thread$", err({ [coroutine.create(print)] = 1 }))
    if jit then
      local ffi = require("ffi")
      assert.matches("message has a key that is a cdata$", err({ [ffi.new("int[1]")] = 1 }))
    end
  end)

  it("prints number keys exactly and string keys as Lua would read them", function()
    local co = coroutine.create(print)
    assert.matches("message%[9007199254740994%] is a thread", err({ [2 ^ 53 + 2] = co }))
    assert.matches('message%["say \\"hi\\"\\\\n"%] is a thread', err({ ['say "hi"\\n'] = co }))
  end)
end)
