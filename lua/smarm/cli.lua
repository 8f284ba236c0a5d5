-- The smarm executable's Lua side (src/lua/main.c): how a script and the prompt run as the main
-- actor of a runtime. main.c parses the command line, loads the script and calls one of these in
-- the VM it made; everything here runs in that VM.
local cli = {}

-- Runs chunk as the main actor with the script's arguments (the global `arg`, set by main.c
-- like the lua interpreter does); returns its results. opts: smarm.run's options from the
-- command line (schedulers, stack_size).
function cli.run(smarm, chunk, opts)
  local args = _G.arg or { n = 0 }
  local ok, err = pcall(smarm.run, function() return chunk(unpack(args, 1, args.n or #args)) end,
    opts)
  -- smarm.run raises the main actor's own error value; its text and traceback are kept aside
  if not ok and err == nil then error(nil, 0) end -- error() without a value: silent, as lua.c
  if not ok then error(smarm.last_traceback() or tostring(err), 0) end
end

local function show(ok, ...)
  if not ok then
    io.stderr:write(tostring((...)), "\n")
  elseif select("#", ...) > 0 then
    print(...)
  end
end

-- The message handler of a prompt line: the error and the line's traceback, without the
-- prompt's own frames (everything from the xpcall that ran the line on).
local function line_traceback(err)
  local text = debug.traceback(type(err) == "string" and err or tostring(err), 2)
  local cut = text:find("\n%s*%[C%]: in function 'xpcall'")
  return cut and text:sub(1, cut - 1) or text
end

-- Compiles the text of one prompt entry: "=expr" and expressions print their values (as lua
-- does); a chunk that is not finished yet (its error is at <eof>) asks for more lines.
local function compile(text)
  if text:sub(1, 1) == "=" then text = "return " .. text:sub(2) end
  local f = loadstring("return " .. text, "=stdin")
  if f then return f end
  local err
  f, err = loadstring(text, "=stdin")
  if f then return f end
  if err:match("<eof>'?$") then return nil, nil, true end -- the chunk stopped short, as lua.c asks
  return nil, err
end

-- The prompt: every entry runs in the main actor, so it may spawn, send, receive and sleep. An
-- entry is a line, or the lines of a chunk that continues (`for i = 1, 3 do` ... `end`); `=expr`
-- and expressions print their values; `smarm` is a global. Input
-- that can keep it waiting (a terminal, a pipe) is read through the IO thread (smarm.fs), so the
-- other actors of scheduler 1 run on meanwhile; a regular file (or a /dev/stdin that cannot be
-- opened) is read with plain reads of the shared descriptor, which keep its position.
function cli.prompt(smarm, opts, interactive)
  return smarm.run(function()
    local st, input = smarm.fs.stat("/dev/stdin"), nil
    if st and st.type ~= "file" then input = smarm.fs.open("/dev/stdin", "r") end
    local function read_line()
      if not input then return io.stdin:read("*l") end
      return input:read("*l")
    end
    if rawget(_G, "smarm") == nil then rawset(_G, "smarm", smarm) end -- preloaded, as a global
    local text = nil -- the lines of an entry that is not finished yet
    while true do
      if interactive then io.stdout:write(text and ">> " or "> "); io.stdout:flush() end
      local line = read_line()
      if not line then
        if interactive then io.stdout:write("\n") end
        if text then io.stderr:write("stdin: unfinished input dropped at the end\n") end
        return
      end
      text = text and (text .. "\n" .. line) or line
      local f, err, more = compile(text)
      if not more then
        text = nil
        if not f then io.stderr:write(err, "\n") else show(xpcall(f, line_traceback)) end
      end
    end
  end, opts)
end

-- `smarm test [busted options]`: busted on this executable's LuaJIT, in plain mode (each spec
-- calls smarm.run itself). busted's modules are looked for where Debian's lua-busted and
-- luarocks put them, after this executable's own paths; `arg` holds busted's options.
local SYSTEM_PATH = "/usr/local/share/lua/5.1/?.lua;/usr/local/share/lua/5.1/?/init.lua;"
  .. "/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua"
local SYSTEM_CPATH = "/usr/local/lib/lua/5.1/?.so;/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;"
  .. "/usr/lib/aarch64-linux-gnu/lua/5.1/?.so;/usr/lib/lua/5.1/?.so"

function cli.test()
  package.path = package.path .. ";" .. SYSTEM_PATH
  package.cpath = package.cpath .. ";" .. SYSTEM_CPATH
  local ok, runner = pcall(require, "busted.runner")
  if not ok then
    error("smarm test: busted cannot be loaded (Debian: apt-get install lua-busted; or luarocks "
      .. "--lua-version 5.1 install busted)\n" .. tostring(runner), 0)
  end
  _G.arg[0] = "smarm test"
  runner({ standalone = false })
end

return cli
