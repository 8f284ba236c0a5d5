-- smarm.plot (lua/smarm/plot.lua): the JSON reader, the SVG of benchmark rows, bench/plot.lua,
-- and the SVG rendered to PNG by a real renderer: rsvg-convert, from Debian's librsvg2-bin
-- (./dev.sh installs it; without it the render cases fail, saying so). No runtime is started in
-- this process: rsvg-convert and the smarm executable are forked from a process without
-- libuv's threads (a fork after them can hang under qemu-user).
local plot = require("smarm.plot")

local exe = os.getenv("SMARM_EXE")

-- The temporary files of a case, removed after it.
local temps = {}
local function temp(suffix)
  local base = os.tmpname()
  temps[#temps + 1] = base
  temps[#temps + 1] = base .. suffix
  return base .. suffix
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local sh = dofile("spec/support/shell.lua").run_merged -- output, exit status

local function count(s, plain)
  local n, i = 0, 1
  while true do
    local at = s:find(plain, i, true)
    if not at then return n end
    n, i = n + 1, at + #plain
  end
end

-- A row as smarm.bench reports it.
local function row(scenario, variant, schedulers, p50)
  return { scenario = scenario, variant = variant, schedulers = schedulers, p50_ns = p50,
    p90_ns = p50 * 1.5, p99_ns = p50 * 4, p999_ns = p50 * 30, max_ns = p50 * 90,
    per_op_ns = p50 * 1.2, ops = 600000, p50_cyc = p50 * 2.1, ghz = 2.1, floor_ns = 51 }
end

local function distribution_rows()
  return { row("switch_cost", "luajit_coro", 1, 30.6), row("switch_cost", "local", 1, 16.2),
    row("pingpong", "remote", 2, 1183.7) }
end

local function parallel_rows()
  local rows = distribution_rows()
  for _, n in ipairs({ 1, 2, 4, 8 }) do rows[#rows + 1] = row("switch_cost", "parallel", n, 16 + n) end
  return rows
end

-- ---- rendering -------------------------------------------------------------------------------

local PNG_SIGNATURE = "\137PNG\r\n\26\n"

local function u32(s, at)
  local a, b, c, d = s:byte(at, at + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- The width, height and bytes of image data (all IDAT chunks) of a PNG file's contents.
local function png_info(data)
  assert.are.equal(PNG_SIGNATURE, data:sub(1, 8), "not a PNG file")
  local width, height, idat = nil, nil, 0
  local at = 9
  while at + 8 <= #data do
    local length, kind = u32(data, at), data:sub(at + 4, at + 7)
    if kind == "IHDR" then width, height = u32(data, at + 8), u32(data, at + 12) end
    if kind == "IDAT" then idat = idat + length end
    at = at + 12 + length
  end
  return width, height, idat
end

-- Renders an SVG file to a PNG of the given width with rsvg-convert; returns the PNG's bytes.
local function render(svg_path, width)
  local _, found = sh("command -v rsvg-convert")
  if found ~= 0 then
    error("rsvg-convert not found: install Debian's librsvg2-bin (apt-get install librsvg2-bin, " ..
      "or ./dev.sh deps lua)", 0)
  end
  local png_path = temp(".png")
  local out, status = sh(string.format("rsvg-convert -w %d -o '%s' '%s'", width, png_path, svg_path))
  assert.are.equal(0, status, "rsvg-convert failed: " .. out)
  return read(png_path)
end

-- Renders rows at 400 px and checks the picture: a PNG of that width, the document's aspect,
-- and much more image data than a blank page of the same size (lines and text, not one colour).
local function check_render(rows)
  local svg_path = temp(".svg")
  assert.is_true(plot.write(svg_path, rows))
  local svg = read(svg_path)
  local w, h = svg:match('<svg [^>]*width="(%d+)" height="(%d+)"')
  w, h = tonumber(w), tonumber(h)
  local width, height, idat = png_info(render(svg_path, 400))
  assert.are.equal(400, width)
  assert.is_true(math.abs(height - 400 * h / w) <= 1, "height " .. height .. " for " .. w .. "x" .. h)
  local blank_path = temp(".svg")
  write(blank_path, string.format('<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" ' ..
    'height="%d"><rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/></svg>\n', w, h, w, h))
  local _, _, blank_idat = png_info(render(blank_path, 400))
  assert.is_true(idat > 10 * blank_idat and idat > 8000,
    "the PNG has " .. idat .. " bytes of image data, a blank one " .. blank_idat)
  return height
end

describe("smarm.plot", function()
  after_each(function()
    for _, path in ipairs(temps) do os.remove(path) end
    temps = {}
  end)

  describe("decode_json", function()
    it("reads the harness's rows and every JSON value", function()
      local text = '[\n  {"scenario": "switch_cost", "variant": "local", "schedulers": 1, ' ..
        '"p50_ns": 16.224000000000000, "max_ns": 3931.9070000000002, "ops": 600000, ' ..
        '"ghz": 1.5040000000000000},\n  {"scenario": "x", "p50_ns": null, "ok": true, "no": false}\n]\n'
      assert.are.same({
        { scenario = "switch_cost", variant = "local", schedulers = 1, p50_ns = 16.224,
          max_ns = 3931.907, ops = 600000, ghz = 1.504 },
        { scenario = "x", ok = true, no = false },
      }, plot.decode_json(text))
      assert.are.same({ 0, -0.5, 1000, 0.02, 12, {}, { {} }, { a = { 1, { b = "c" } } } },
        plot.decode_json(' [0, -0.5, 1e3, 2E-2, 1.2e+1, {}, [ {} ], {"a": [1, {"b": "c"}]}] '))
      assert.are.equal('a"b\\c/d\b\f\n\r\t\195\169\240\159\152\128',
        plot.decode_json('"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00"'))
      assert.are.equal(42, plot.decode_json("42"))
      assert.is_nil(plot.decode_json("null"))
    end)

    it("refuses bad input, saying what and at which byte", function()
      local cases = {
        { "", "unexpected end of input at byte 1" },
        { "[", "unexpected end of input at byte 2" },
        { "[1,]", "expected a value at byte 4" },
        { "[1 2]", "expected ',' or ']' at byte 4" },
        { '{"a" 1}', "expected ':' at byte 6" },
        { "{a: 1}", "expected a string key at byte 2" },
        { '{"a": 1,}', "expected a string key at byte 9" },
        { '{"a": 1', "unexpected end of input at byte 8" },
        { '"abc', "unterminated string at byte 1" },
        { '"a\\qb"', "bad escape '\\q' at byte 3" },
        { '"a\\u12"', "bad \\u escape at byte 3" },
        { '"\\ud800"', "lone surrogate at byte 2" },
        { '"\\udc00"', "lone surrogate at byte 2" },
        { '"a\tb"', "control character in a string at byte 3" },
        { "01", "bad number at byte 1" },
        { "[-]", "bad number at byte 2" },
        { "1.e5", "bad number at byte 1" },
        { "+1", "expected a value at byte 1" },
        { "nul", "expected a value at byte 1" },
        { "[1] x", "trailing characters at byte 5" },
        { string.rep("[", 201), "nesting too deep at byte 201" },
      }
      for _, c in ipairs(cases) do
        local ok, err = pcall(plot.decode_json, c[1])
        assert.is_false(ok, "no error for " .. string.format("%q", c[1]))
        assert.are.equal("smarm.plot: " .. c[2], err)
      end
      assert.has_error(function() plot.decode_json(nil) end,
        "bad argument #1 to 'decode_json' (string expected, got nil)")
    end)
  end)

  describe("svg", function()
    it("draws one polyline per row, with the legend, the title and the axes", function()
      local svg = plot.svg(distribution_rows())
      assert.matches('^<%?xml version="1.0" encoding="UTF%-8"%?>\n<svg xmlns="http://www.w3.org/2000/svg"', svg)
      assert.matches("</svg>\n$", svg)
      assert.are.equal(3, count(svg, "<polyline "))
      for _, label in ipairs({ "switch_cost luajit_coro (1)", "switch_cost local (1)", "pingpong remote (2)",
        ">smarm bench<", ">p50<", ">p90<", ">p99<", ">p99.9<", ">max<", ">10 ns<", ">1 &#181;s<" }) do
        assert.is_true(svg:find(label, 1, true) ~= nil, "no " .. label .. " in\n" .. svg)
      end
      assert.is_nil(svg:find('id="parallel"', 1, true))
      assert.is_nil(svg:find("<script", 1, true))
      assert.is_nil(svg:find("<style", 1, true))
    end)

    it("escapes text", function()
      local rows = { row("a<&>b", "x\"y'", 3, 100) }
      local svg = plot.svg(rows, { title = "T<&>" })
      assert.is_true(svg:find("a&lt;&amp;&gt;b x&quot;y&apos; (3)", 1, true) ~= nil, svg)
      assert.is_true(svg:find(">T&lt;&amp;&gt;<", 1, true) ~= nil, svg)
      assert.is_nil(svg:find("a<&>b", 1, true))
      assert.is_nil(svg:find("T<&>", 1, true))
    end)

    it("draws the parallel panel only when there are switch_cost parallel rows", function()
      local rows = parallel_rows()
      local svg = plot.svg(rows)
      local panel = svg:match('<g id="parallel">.*$')
      assert.is_true(panel ~= nil, "no parallel panel in\n" .. svg)
      -- a polyline per row in the first panel, then p50 and p99 (dashed) against schedulers
      assert.are.equal(#rows + 2, count(svg, "<polyline "))
      assert.are.equal(2, count(panel, "<polyline "))
      assert.matches('<polyline points="[^"]*" stroke%-dasharray', panel)
      for _, label in ipairs({ ">schedulers<", ">1<", ">2<", ">4<", ">8<", ">p50<", ">p99<" }) do
        assert.is_true(panel:find(label, 1, true) ~= nil, "no " .. label .. " in\n" .. panel)
      end
    end)

    it("gives the same bytes for the same rows", function()
      assert.are.equal(plot.svg(parallel_rows(), { title = "t" }), plot.svg(parallel_rows(), { title = "t" }))
    end)

    it("leaves out rows without p50_ns and refuses to draw none", function()
      local rows = { row("a", "b", 1, 10), { scenario = "no", variant = "numbers" } }
      assert.are.equal(1, count(plot.svg(rows), "<polyline "))
      assert.has_error(function() plot.svg({}) end, "smarm.plot: no rows to plot")
      assert.has_error(function() plot.svg({ { scenario = "x", p50_ns = "1" } }) end,
        "smarm.plot: no rows to plot")
      assert.has_error(function() plot.svg(nil) end,
        "bad argument #1 to 'svg' (table of rows expected, got nil)")
    end)

    it("leaves out values that are not finite (they would make an endless axis)", function()
      local inf = plot.decode_json('[{"scenario": "i", "variant": "v", "p50_ns": 1e999}]')[1]
      local rows = { row("a", "b", 1, 10), inf, { scenario = "n", variant = "v", p50_ns = 0 / 0 } }
      local svg = plot.svg(rows)
      assert.are.equal(1, count(svg, "<polyline "))
      assert.is_nil(svg:find("inf", 1, true))
    end)
  end)

  describe("write", function()
    it("writes the SVG, or says why it cannot", function()
      local path = temp(".svg")
      assert.is_true(plot.write(path, distribution_rows(), { title = "w" }))
      assert.are.equal(plot.svg(distribution_rows(), { title = "w" }), read(path))
      local ok, err = plot.write("/nonexistent-dir/x.svg", distribution_rows())
      assert.is_nil(ok)
      assert.matches("nonexistent%-dir", err)
    end)
  end)

  describe("rendered by rsvg-convert", function()
    it("renders a distribution-only plot", function()
      check_render(distribution_rows())
    end)

    it("renders a plot with the parallel panel, taller than without", function()
      local with_panel = check_render(parallel_rows())
      assert.is_true(with_panel > check_render(distribution_rows()) + 150)
    end)
  end)

  describe("bench/plot.lua", function()
    if not exe then
      pending("SMARM_EXE is not set (./dev.sh test sets it)")
      return
    end

    it("writes the SVG of a results file", function()
      local json, svg = temp(".json"), temp(".svg")
      write(json, '[\n  {"scenario": "switch_cost", "variant": "local", "schedulers": 1, "p50_ns": 16.2, ' ..
        '"p99_ns": 60.3, "max_ns": 3931.9}\n]\n')
      local out, status = sh(exe .. " -n bench/plot.lua " .. json .. " " .. svg .. " 'my <title>'")
      assert.are.equal(0, status, out)
      local doc = read(svg)
      assert.matches("^<%?xml", doc)
      assert.is_true(doc:find(">my &lt;title&gt;<", 1, true) ~= nil, doc)
      assert.are.equal(1, count(doc, "<polyline "))
    end)

    it("fails with a message and status 1", function()
      local out, status = sh(exe .. " -n bench/plot.lua")
      assert.are.equal(1, status, out)
      assert.matches("usage: smarm %-n bench/plot.lua RESULTS.json OUT.svg %[title%]", out)
      out, status = sh(exe .. " -n bench/plot.lua /nonexistent.json " .. temp(".svg"))
      assert.are.equal(1, status, out)
      assert.matches("bench/plot.lua: /nonexistent.json: No such file or directory", out)
      local json = temp(".json")
      write(json, "[1,]")
      out, status = sh(exe .. " -n bench/plot.lua " .. json .. " " .. temp(".svg"))
      assert.are.equal(1, status, out)
      assert.matches("smarm.plot: expected a value at byte 4", out, 1, true)
    end)
  end)
end)
