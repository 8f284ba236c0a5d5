-- A node of bench/skynet.lua, as a module so that spawn_on can name it ("skynet_node.node") in
-- another scheduler's VM. A node numbered `num` with `level` levels below it (leaves at 0)
-- sends the sum of its subtree's leaf numbers to `parent`.
local smarm = require("smarm")

local M = {}

function M.node(parent, num, level, size)
  if level == 0 then
    smarm.send(parent, num)
    return
  end
  local me, child_size = smarm.self(), size / 10
  for i = 0, 9 do
    smarm.spawn(M.node, me, num + i * child_size, level - 1, child_size)
  end
  local sum = 0
  for _ = 1, 10 do sum = sum + smarm.receive() end
  smarm.send(parent, sum)
end

return M
