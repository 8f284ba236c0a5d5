-- smarm.plot: pictures of benchmark results. It reads the JSON rows that smarm.bench writes
-- (`--json FILE`) and draws them as one self-contained SVG 1.1 document: no fonts, style sheets
-- or scripts from outside, so that any renderer (a browser, rsvg-convert) shows the same.
--
-- Panel 1 is the percentile distribution of every row: the percentile on a log-of-tail axis
-- (x = -log10(1 - p): p50, p90, p99 and p99.9 one step apart from p90 on, the maximum one step
-- after p99.9) against the time per operation on a log axis, one polyline with markers per row.
-- Panel 2, drawn only when there are rows of scenario switch_cost variant parallel, is their
-- p50 (solid) and p99 (dashed) against the number of schedulers (a log2 axis: 1, 2, 4, 8 one
-- step apart).
--
-- Pure Lua (5.1 and LuaJIT, no FFI): it needs no runtime, so a script can plot in plain mode.
-- The output depends on the input alone (rows in their order, numbers through string.format),
-- so the same rows give the same bytes.
local plot = {}

local format, concat = string.format, table.concat
local floor, ceil, log, max, min = math.floor, math.ceil, math.log, math.max, math.min

-- A value that can be drawn: a number, not NaN nor infinite (JSON may say 1e999; such a value
-- would make an axis without end).
local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end

local function log10(x) return log(x) / log(10) end
local function log2(x) return log(x) / log(2) end

-- ---- JSON ------------------------------------------------------------------------------------

local MAX_DEPTH = 200 -- nesting deeper than this is refused rather than overflowing the C stack

local function json_error(what, pos)
  error(format("smarm.plot: %s at byte %d", what, pos), 0)
end

-- The UTF-8 bytes of a code point.
local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + floor(cp / 0x40), 0x80 + cp % 0x40) end
  if cp < 0x10000 then
    return string.char(0xE0 + floor(cp / 0x1000), 0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
  end
  return string.char(0xF0 + floor(cp / 0x40000), 0x80 + floor(cp / 0x1000) % 0x40,
    0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

local ESCAPES = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r",
  t = "\t" }

local function skip_space(text, pos)
  return (text:find("[^ \t\n\r]", pos)) or #text + 1
end

-- The string whose opening quote is at pos; returns it and the position after its closing quote.
local function read_string(text, pos)
  local parts = {}
  local i = pos + 1
  while true do
    local stop = text:find('[%z\1-\31\\"]', i)
    if not stop then json_error("unterminated string", pos) end
    parts[#parts + 1] = text:sub(i, stop - 1)
    local c = text:sub(stop, stop)
    if c == '"' then return concat(parts), stop + 1 end
    if c ~= "\\" then json_error("control character in a string", stop) end
    local e = text:sub(stop + 1, stop + 1)
    if ESCAPES[e] then
      parts[#parts + 1] = ESCAPES[e]
      i = stop + 2
    elseif e == "u" then
      local hex = text:match("^%x%x%x%x", stop + 2)
      if not hex then json_error("bad \\u escape", stop) end
      local cp = tonumber(hex, 16)
      i = stop + 6
      if cp >= 0xD800 and cp <= 0xDBFF then -- a high surrogate: its low half must follow
        local low = text:match("^\\u(%x%x%x%x)", i)
        low = low and tonumber(low, 16)
        if not low or low < 0xDC00 or low > 0xDFFF then json_error("lone surrogate", stop) end
        cp = 0x10000 + (cp - 0xD800) * 0x400 + (low - 0xDC00)
        i = i + 6
      elseif cp >= 0xDC00 and cp <= 0xDFFF then
        json_error("lone surrogate", stop)
      end
      parts[#parts + 1] = utf8_char(cp)
    elseif e == "" then
      json_error("unterminated string", pos)
    else
      json_error("bad escape '\\" .. e .. "'", stop)
    end
  end
end

local read_value

-- The value at pos (no space before it); returns it and the position after it.
function read_value(text, pos, depth)
  local c = text:sub(pos, pos)
  if c == "{" or c == "[" then
    if depth >= MAX_DEPTH then json_error("nesting too deep", pos) end
    local close = c == "{" and "}" or "]"
    local result = {}
    local n = 0
    local i = skip_space(text, pos + 1)
    if text:sub(i, i) == close then return result, i + 1 end
    while true do
      if c == "{" then
        if text:sub(i, i) ~= '"' then
          json_error(i > #text and "unexpected end of input" or "expected a string key", i)
        end
        local key
        key, i = read_string(text, i)
        i = skip_space(text, i)
        if text:sub(i, i) ~= ":" then
          json_error(i > #text and "unexpected end of input" or "expected ':'", i)
        end
        result[key], i = read_value(text, skip_space(text, i + 1), depth + 1)
      else
        n = n + 1
        result[n], i = read_value(text, i, depth + 1)
      end
      i = skip_space(text, i)
      local sep = text:sub(i, i)
      if sep == close then return result, i + 1 end
      if sep ~= "," then
        json_error(i > #text and "unexpected end of input" or format("expected ',' or '%s'", close), i)
      end
      i = skip_space(text, i + 1)
    end
  elseif c == '"' then
    return read_string(text, pos)
  elseif c == "-" or c:match("%d") then
    -- JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    local int = text:match("^-?0", pos) or text:match("^-?[1-9]%d*", pos)
    if not int then json_error("bad number", pos) end
    local i = pos + #int
    if text:sub(i, i) == "." then
      local frac = text:match("^%.%d+", i)
      if not frac then json_error("bad number", pos) end
      i = i + #frac
    end
    if text:find("^[eE]", i) then
      local exp = text:match("^[eE][+-]?%d+", i)
      if not exp then json_error("bad number", pos) end
      i = i + #exp
    end
    if text:find("^[%w.]", i) then json_error("bad number", pos) end -- as 01 or 1.2.3
    return tonumber(text:sub(pos, i - 1)), i
  else
    if text:sub(pos, pos + 3) == "true" then return true, pos + 4 end
    if text:sub(pos, pos + 4) == "false" then return false, pos + 5 end
    if text:sub(pos, pos + 3) == "null" then return nil, pos + 4 end
    json_error(pos > #text and "unexpected end of input" or "expected a value", pos)
  end
end

-- Reads a JSON text (RFC 8259, strictly: no comments, no trailing commas) into Lua values:
-- objects and arrays as tables, null as nil (an object leaves the key out). Raises
-- "smarm.plot: <what is wrong> at byte N" on bad input.
function plot.decode_json(text)
  if type(text) ~= "string" then
    error("bad argument #1 to 'decode_json' (string expected, got " .. type(text) .. ")", 2)
  end
  local value, pos = read_value(text, skip_space(text, 1), 0)
  pos = skip_space(text, pos)
  if pos <= #text then json_error("trailing characters", pos) end
  return value
end

-- ---- SVG -------------------------------------------------------------------------------------

-- Text for XML character data and attribute values: the five markup characters escaped, and
-- the control characters XML 1.0 cannot hold at all replaced by '?'.
local XML_ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
  ["'"] = "&apos;" }
local function xml(s)
  s = tostring(s):gsub("[&<>\"']", XML_ESCAPES)
  return (s:gsub("[%z\1-\8\11\12\14-\31]", "?"))
end

local function num(x) return format("%.1f", x) end

-- Line colours (matplotlib's tab10) and marker shapes; row i gets colour i and shape i, cycling,
-- so rows 1-20 all differ.
local COLOURS = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf" }
local SHAPES = { "circle", "square", "triangle", "diamond" }

local function marker(shape, x, y, colour)
  if shape == "circle" then
    return format('<circle cx="%s" cy="%s" r="3.5" fill="%s"/>', num(x), num(y), colour)
  elseif shape == "square" then
    return format('<rect x="%s" y="%s" width="7" height="7" fill="%s"/>', num(x - 3.5), num(y - 3.5),
      colour)
  elseif shape == "triangle" then
    return format('<path d="M%s %sL%s %sL%s %sZ" fill="%s"/>', num(x), num(y - 4.5), num(x + 4.5),
      num(y + 3.5), num(x - 4.5), num(y + 3.5), colour)
  end
  return format('<path d="M%s %sL%s %sL%s %sL%s %sZ" fill="%s"/>', num(x), num(y - 5), num(x + 5),
    num(y), num(x), num(y + 5), num(x - 5), num(y), colour)
end

-- A tick label for 10^k ns.
local function time_label(k)
  local units = { { 9, "s" }, { 6, "ms" }, { 3, "&#181;s" }, { 0, "ns" } }
  for _, u in ipairs(units) do
    if k >= u[1] then return format("%d %s", floor(10 ^ (k - u[1]) + 0.5), u[2]) end
  end
  return format("%g ns", 10 ^ k)
end

-- The decades [lo, hi] (exponents of 10) that hold the positive values, at least one apart.
local function decades(values)
  local smallest, largest
  for _, v in ipairs(values) do
    if v > 0 then
      smallest = smallest and min(smallest, v) or v
      largest = largest and max(largest, v) or v
    end
  end
  if not smallest then return 0, 1 end
  local lo, hi = floor(log10(smallest) + 1e-9), ceil(log10(largest) - 1e-9)
  if hi <= lo then hi = lo + 1 end
  return lo, hi
end

-- Approximate width of text in px at a font size (no font metrics here: 0.6 em a character, a
-- little more than DejaVu Sans's average, so that the legend's columns do not collide).
local function text_width(s, size) return #s * size * 0.6 end

local FONT = 12
local PLOT_HEIGHT = 280
local MARGIN_LEFT, MARGIN_RIGHT = 76, 28
local LEGEND_LINE = 18

-- A panel: a frame at (left, top) of w by h with a log10 y axis over the decades [lo, hi] and an
-- x axis given by ticks { { x =, label = } } over [x_lo, x_hi]. Appends its SVG to out and
-- returns the functions that place a point.
local function axes(out, p)
  local function px(x) return p.left + (x - p.x_lo) / (p.x_hi - p.x_lo) * p.w end
  local function py(v)
    local y = v > 0 and log10(v) or p.lo
    y = max(p.lo, min(p.hi, y))
    return p.top + p.h - (y - p.lo) / (p.hi - p.lo) * p.h
  end
  out[#out + 1] = format('<text x="%s" y="%s" font-size="14" font-weight="bold">%s</text>',
    num(p.left), num(p.top - 10), xml(p.title))
  out[#out + 1] = format('<rect x="%s" y="%s" width="%s" height="%s" fill="#ffffff" stroke="#000000"/>',
    num(p.left), num(p.top), num(p.w), num(p.h))
  -- the y axis: a labelled line at each decade, lighter ones at 2..9 times it
  out[#out + 1] = '<g font-size="11" text-anchor="end">'
  for k = p.lo, p.hi do
    local y = py(10 ^ k)
    out[#out + 1] = format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#c8c8c8"/>', num(p.left),
      num(y), num(p.left + p.w), num(y))
    out[#out + 1] = format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#000000"/>', num(p.left - 5),
      num(y), num(p.left), num(y))
    out[#out + 1] = format('<text x="%s" y="%s">%s</text>', num(p.left - 8), num(y + 4), time_label(k))
    if k < p.hi and p.hi - p.lo <= 6 then -- (over more decades they would crowd the panel)
      for m = 2, 9 do
        local ym = py(m * 10 ^ k)
        out[#out + 1] = format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ececec"/>',
          num(p.left), num(ym), num(p.left + p.w), num(ym))
      end
    end
  end
  out[#out + 1] = "</g>"
  out[#out + 1] = format(
    '<text x="%s" y="%s" font-size="%d" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>',
    num(p.left - 60), num(p.top + p.h / 2), FONT, num(p.left - 60), num(p.top + p.h / 2),
    xml(p.y_title))
  -- the x axis
  out[#out + 1] = '<g font-size="11" text-anchor="middle">'
  for _, t in ipairs(p.ticks) do
    local x = px(t.x)
    out[#out + 1] = format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#c8c8c8"%s/>', num(x),
      num(p.top), num(x), num(p.top + p.h), t.dashed and ' stroke-dasharray="4,3"' or "")
    out[#out + 1] = format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#000000"/>', num(x),
      num(p.top + p.h), num(x), num(p.top + p.h + 5))
    out[#out + 1] = format('<text x="%s" y="%s">%s</text>', num(x), num(p.top + p.h + 18), xml(t.label))
  end
  out[#out + 1] = "</g>"
  out[#out + 1] = format('<text x="%s" y="%s" font-size="%d" text-anchor="middle">%s</text>',
    num(p.left + p.w / 2), num(p.top + p.h + 36), FONT, xml(p.x_title))
  return px, py
end

-- A series: one polyline through the points (px, py already applied) and a marker at each.
local function series(out, points, colour, shape, dashed)
  local coords = {}
  for i, pt in ipairs(points) do coords[i] = num(pt[1]) .. "," .. num(pt[2]) end
  out[#out + 1] = format('<g fill="none" stroke="%s" stroke-width="2">', colour)
  out[#out + 1] = format('<polyline points="%s"%s/>', concat(coords, " "),
    dashed and ' stroke-dasharray="7,4"' or "")
  out[#out + 1] = "</g>"
  out[#out + 1] = '<g stroke="none">'
  for _, pt in ipairs(points) do out[#out + 1] = marker(shape, pt[1], pt[2], colour) end
  out[#out + 1] = "</g>"
end

-- The legend's layout below a panel: as many columns as the widest entry allows.
local function legend_layout(entries, width)
  local widest = 0
  for _, e in ipairs(entries) do widest = max(widest, text_width(e.label, FONT)) end
  local column = widest + 44
  local columns = max(1, min(#entries, floor(width / column)))
  return column, columns, ceil(#entries / columns)
end

local function legend(out, entries, left, top, width)
  local column, columns = legend_layout(entries, width)
  out[#out + 1] = format('<g font-size="%d">', FONT)
  for i, e in ipairs(entries) do
    local x = left + ((i - 1) % columns) * column
    local y = top + floor((i - 1) / columns) * LEGEND_LINE
    out[#out + 1] = format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>',
      num(x), num(y), num(x + 28), num(y), e.colour, e.dashed and ' stroke-dasharray="7,4"' or "")
    out[#out + 1] = marker(e.shape, x + 14, y, e.colour)
    out[#out + 1] = format('<text x="%s" y="%s">%s</text>', num(x + 34), num(y + 4), xml(e.label))
  end
  out[#out + 1] = "</g>"
end

-- The percentiles of panel 1: the row's field and its place on the log-of-tail axis.
local PERCENTILES = {
  { key = "p50_ns", x = log10(2), label = "p50" },
  { key = "p90_ns", x = 1, label = "p90" },
  { key = "p99_ns", x = 2, label = "p99" },
  { key = "p999_ns", x = 3, label = "p99.9" },
  { key = "max_ns", x = 4, label = "max", dashed = true },
}

local function row_label(r)
  local parts = {}
  for _, k in ipairs({ "scenario", "variant", "peer" }) do
    if r[k] ~= nil then parts[#parts + 1] = tostring(r[k]) end
  end
  if r.schedulers ~= nil then parts[#parts + 1] = "(" .. tostring(r.schedulers) .. ")" end
  return concat(parts, " ")
end

-- The SVG document (a string) of rows as smarm.bench reports them. opts: title (default
-- "smarm bench"), width in px (default 800). Rows without a number p50_ns are left out; none
-- left raises "smarm.plot: no rows to plot".
function plot.svg(rows, opts)
  if type(rows) ~= "table" then
    error("bad argument #1 to 'svg' (table of rows expected, got " .. type(rows) .. ")", 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("bad argument #2 to 'svg' (table expected, got " .. type(opts) .. ")", 2)
  end
  opts = opts or {}
  local width = opts.width or 800
  if type(width) ~= "number" or width < 300 then
    error("bad argument #2 to 'svg' (opts.width must be a number of at least 300)", 2)
  end
  local title = opts.title ~= nil and tostring(opts.title) or "smarm bench"

  local plotted, parallel = {}, {}
  for _, r in ipairs(rows) do
    if type(r) == "table" and finite(r.p50_ns) then
      plotted[#plotted + 1] = r
      if r.scenario == "switch_cost" and r.variant == "parallel" and finite(r.schedulers)
          and r.schedulers > 0 then
        parallel[#parallel + 1] = r
      end
    end
  end
  if #plotted == 0 then error("smarm.plot: no rows to plot", 0) end

  local plot_w = width - MARGIN_LEFT - MARGIN_RIGHT
  local out = {}
  local y = 36 -- below the title

  -- panel 1: the distributions
  local entries, values = {}, {}
  for i, r in ipairs(plotted) do
    entries[i] = { label = row_label(r), colour = COLOURS[(i - 1) % #COLOURS + 1],
      shape = SHAPES[(i - 1) % #SHAPES + 1] }
    for _, p in ipairs(PERCENTILES) do
      if finite(r[p.key]) then values[#values + 1] = r[p.key] end
    end
  end
  local lo, hi = decades(values)
  local ticks = {}
  for i, p in ipairs(PERCENTILES) do ticks[i] = { x = p.x, label = p.label, dashed = p.dashed } end
  local top = y + 30
  out[#out + 1] = '<g id="distribution">'
  local px, py = axes(out, { left = MARGIN_LEFT, top = top, w = plot_w, h = PLOT_HEIGHT, lo = lo,
    hi = hi, x_lo = 0.05, x_hi = 4.25, ticks = ticks, title = "Percentile distribution",
    x_title = "percentile (log-of-tail scale)", y_title = "time per operation" })
  for i, r in ipairs(plotted) do
    local points = {}
    for _, p in ipairs(PERCENTILES) do
      local v = r[p.key]
      if finite(v) then points[#points + 1] = { px(p.x), py(v) } end
    end
    series(out, points, entries[i].colour, entries[i].shape)
  end
  local legend_top = top + PLOT_HEIGHT + 60
  legend(out, entries, MARGIN_LEFT, legend_top, plot_w)
  out[#out + 1] = "</g>"
  local _, _, lines = legend_layout(entries, plot_w)
  y = legend_top + (lines - 1) * LEGEND_LINE + 20

  -- panel 2: switch_cost parallel against schedulers
  if #parallel > 0 then
    table.sort(parallel, function(a, b) return a.schedulers < b.schedulers end)
    local pvalues, seen, sticks = {}, {}, {}
    local s_lo, s_hi
    for _, r in ipairs(parallel) do
      pvalues[#pvalues + 1] = r.p50_ns
      if finite(r.p99_ns) then pvalues[#pvalues + 1] = r.p99_ns end
      local s = r.schedulers
      if not seen[s] then
        seen[s] = true
        sticks[#sticks + 1] = { x = log2(s), label = format("%g", s) }
      end
      s_lo, s_hi = min(s_lo or log2(s), log2(s)), max(s_hi or log2(s), log2(s))
    end
    local pad = max(0.25, (s_hi - s_lo) * 0.06)
    local plo, phi = decades(pvalues)
    top = y + 40
    out[#out + 1] = '<g id="parallel">'
    local qx, qy = axes(out, { left = MARGIN_LEFT, top = top, w = plot_w, h = PLOT_HEIGHT, lo = plo,
      hi = phi, x_lo = s_lo - pad, x_hi = s_hi + pad, ticks = sticks,
      title = "switch_cost parallel: cost against schedulers", x_title = "schedulers",
      y_title = "time per operation" })
    local p50, p99 = {}, {}
    for _, r in ipairs(parallel) do
      p50[#p50 + 1] = { qx(log2(r.schedulers)), qy(r.p50_ns) }
      if finite(r.p99_ns) then p99[#p99 + 1] = { qx(log2(r.schedulers)), qy(r.p99_ns) } end
    end
    local pentries = { { label = "p50", colour = COLOURS[1], shape = "circle" } }
    series(out, p50, COLOURS[1], "circle")
    if #p99 > 0 then
      pentries[2] = { label = "p99", colour = COLOURS[4], shape = "square", dashed = true }
      series(out, p99, COLOURS[4], "square", true)
    end
    legend_top = top + PLOT_HEIGHT + 60
    legend(out, pentries, MARGIN_LEFT, legend_top, plot_w)
    out[#out + 1] = "</g>"
    _, _, lines = legend_layout(pentries, plot_w)
    y = legend_top + (lines - 1) * LEGEND_LINE + 20
  end

  local height = ceil(y)
  local head = {
    '<?xml version="1.0" encoding="UTF-8"?>',
    format('<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" ' ..
      'viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
      width, height, width, height),
    format("<title>%s</title>", xml(title)),
    format('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>', width, height),
    format('<text x="%s" y="26" font-size="18" font-weight="bold" text-anchor="middle">%s</text>',
      num(width / 2), xml(title)),
  }
  return concat(head, "\n") .. "\n" .. concat(out, "\n") .. "\n</svg>\n"
end

-- Writes plot.svg(rows, opts) to the file at path. Returns true, or nil and a message when the
-- file cannot be written; bad rows raise as in plot.svg.
function plot.write(path, rows, opts)
  if type(path) ~= "string" then
    error("bad argument #1 to 'write' (string expected, got " .. type(path) .. ")", 2)
  end
  local doc = plot.svg(rows, opts)
  local f, err = io.open(path, "w")
  if not f then return nil, err end
  local wrote, werr = f:write(doc)
  local closed, cerr = f:close()
  if not wrote then return nil, path .. ": " .. tostring(werr) end
  if not closed then return nil, path .. ": " .. tostring(cerr) end
  return true
end

return plot
