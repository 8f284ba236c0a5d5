-- spec/support/script.lua: runs a Lua script by the executable, in a process of its own, for the
-- cases that need one (collector settings and finalizers of their own, a small C stack, a crash
-- that must not take busted with it). Every HANG in the text becomes guard.HANG.
local shell = dofile("spec/support/shell.lua")
local guard = dofile("spec/support/guard.lua")

local script = {}

-- Runs text as `$SMARM_EXE [options] FILE`: returns its stdout, stderr and exit status, or nil
-- when SMARM_EXE is not set (the caller marks its case pending).
function script.run(text, options)
  if not os.getenv("SMARM_EXE") then return nil end
  local name = os.tmpname() .. ".lua"
  local f = assert(io.open(name, "w"))
  f:write((text:gsub("HANG", tostring(guard.HANG))))
  f:close()
  local out, err, status = shell.run("sh -c '$1 " .. (options or "") .. " \"$2\"' sh \"$SMARM_EXE\" "
    .. name)
  os.remove(name)
  return out, err, status
end

return script
