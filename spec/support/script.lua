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

-- Lua text for such a script: from there on, finalizers churn the table `name` (a local made
-- before it): each, run at a collection step, takes the table's keys that begin with `prefix`,
-- adds 1 to 100 new ones (prefix .. count, whose value is the Lua expression `value`) until the
-- table grows, and sets up the next. `added` (a local it makes) counts the keys added. The
-- collector runs often: a walk of the table that allocates meets the finalizers.
function script.churn(name, prefix, value)
  return (([[
      local added = 0
      local churn
      function churn() -- a finalizer: the keys PREFIX.. go, others come, until NAME grows
        getmetatable(newproxy(true)).__gc = churn -- another for the next cycle
        for k in pairs(NAME) do
          if k:sub(1, 1) == "PREFIX" then NAME[k] = nil end
        end
        for _ = 1, 1 + added % 100 do
          added = added + 1
          NAME["PREFIX" .. added] = VALUE
        end
      end
      collectgarbage("setpause", 10)
      collectgarbage("setstepmul", 1000)
      getmetatable(newproxy(true)).__gc = churn
]]):gsub("%u%u+", { NAME = name, PREFIX = prefix, VALUE = value }))
end

return script
