-- bench/transfer_code.lua: the code bench/transfer.lua spawns by name ("transfer_code.entry");
-- the same code travels there as a closure. Three nested functions: entry calls a, a calls b,
-- b calls c.
local smarm = require("smarm")

local M = {}

local function c(x) return x + 1 end
local function b(x) return c(x) * 2 end
local function a(x) return b(x) - 1 end

function M.entry(owner)
  smarm.send(owner, a(1))
end

return M
