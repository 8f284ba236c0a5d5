-- The benchmark harness: smarm.clock, smarm.histogram, smarm.bench (lua/smarm/bench.lua).
local smarm = require("smarm")
local bench = require("smarm.bench")

describe("smarm.histogram", function()
  it("gives quantiles within 1% on known data", function()
    local h = smarm.histogram()
    for v = 1, 100000 do h:record(v) end
    assert.are.equal(100000, h:count())
    assert.are.equal(100000, h:max())
    assert.is_true(math.abs(h:quantile(0.5) - 50000) / 50000 < 0.01)
    assert.is_true(math.abs(h:quantile(0.99) - 99000) / 99000 < 0.01)
    assert.is_true(math.abs(h:mean() - 50000) / 50000 < 0.01)
    assert.are.equal(100000, h:quantile(1))
  end)

  it("merges, and travels as an export string", function()
    local a, b = smarm.histogram(), smarm.histogram()
    for _ = 1, 10 do a:record(7) end
    for _ = 1, 10 do b:record(1000) end
    local c = smarm.histogram()
    c:import(a:export())
    c:import(b:export())
    assert.are.equal(20, c:count())
    assert.are.equal(7, c:quantile(0.25))
    assert.is_true(math.abs(c:quantile(0.75) - 1000) < 10)
    a:merge(b)
    assert.are.equal(20, a:count())
    a:reset()
    assert.are.equal(0, a:count())
    assert.has_error(function() c:import("junk") end)
    assert.has_error(function() c:quantile(2) end)
  end)
end)

describe("smarm.clock", function()
  it("reads both lenses, moving forward together", function()
    local t0, c0 = smarm.clock()
    local t1, c1
    repeat t1, c1 = smarm.clock() until t1 - t0 > 1e6
    assert.is_true(c1 > c0)
    local ghz = (c1 - c0) / (t1 - t0)
    assert.is_true(ghz > 0.01 and ghz < 100)
  end)
end)

describe("smarm.bench", function()
  it("measures, reports the key=value line and writes JSON", function()
    local json = os.tmpname()
    bench.args({ "--json", json })
    local lines = {}
    -- busted gives each spec file its own environment: the harness prints through _G.print
    local real_print = _G.print
    _G.print = function(...) lines[#lines + 1] = table.concat({ ... }, "\t") end
    local ok, err = pcall(function()
      smarm.run(function()
        local calls = 0
        local r = bench.measure(function(n) calls = calls + n; for _ = 1, n do smarm.yield() end end,
          { batch = 10, rounds = 1000, warmup = 100, runs = 2 })
        assert(calls == 2 * 100 + 2 * 1000, "op did not get the operations asked for: " .. calls)
        bench.report({ scenario = "test", variant = "yield", extra_field = 42 }, r)
      end, { schedulers = 1 })
      bench.finish()
    end)
    _G.print = real_print
    assert.is_true(ok, err)
    local line = lines[1]
    for _, k in ipairs({ "scenario=test", "variant=yield", "schedulers=1", "p50_ns=", "p90_ns=",
      "p99_ns=", "max_ns=", "per_op_ns=", "ops=2000", "extra_field=42" }) do
      assert.truthy(line:find(k, 1, true), k .. " missing in: " .. line)
    end
    local f = assert(io.open(json))
    local text = f:read("*a")
    f:close()
    os.remove(json)
    assert.matches('"variant": "yield"', text)
    assert.matches('"extra_field": 42', text)
  end)
end)
