-- bench/plot.lua: the picture of a benchmark run. Reads the JSON rows that a bench script wrote
-- with `--json FILE` and draws them as an SVG (smarm.plot): the percentile distribution of every
-- row and, when the run has them, switch_cost's parallel rows against the number of schedulers.
-- It measures nothing and starts no runtime.
-- Run: smarm -n bench/plot.lua RESULTS.json OUT.svg [title]
-- (e.g. smarm -n bench/switch_cost.lua --json sc.json && smarm -n bench/plot.lua sc.json sc.svg;
-- rsvg-convert sc.svg -o sc.png makes a PNG of it).
local plot = require("smarm.plot")

local function fail(msg)
  io.stderr:write("bench/plot.lua: ", msg, "\n")
  os.exit(1)
end

local results, out, title = arg[1], arg[2], arg[3]
if not results or not out then
  io.stderr:write("usage: smarm -n bench/plot.lua RESULTS.json OUT.svg [title]\n")
  os.exit(1)
end

local f, err = io.open(results, "rb")
if not f then fail(err) end
local text = f:read("*a")
f:close()

local ok, rows = pcall(plot.decode_json, text)
if not ok then fail(results .. ": " .. tostring(rows)) end
if type(rows) ~= "table" then fail(results .. ": a JSON array of rows expected") end
-- bad rows raise (no rows to plot); a file that cannot be written is an answer
local called, wrote, why = pcall(plot.write, out, rows, { title = title })
if not called then fail(results .. ": " .. tostring(wrote)) end
if not wrote then fail(why) end
io.stderr:write("bench/plot.lua: wrote ", out, "\n")
