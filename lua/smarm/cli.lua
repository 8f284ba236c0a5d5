-- The smarm executable's Lua side (src/lua/main.c): how a script and the prompt run as the main
-- actor of a runtime. main.c parses the command line, loads the script and calls one of these in
-- the VM it made; everything here runs in that VM.
local cli = {}

-- -N NODE [-C COOKIE]: opts.node and opts.cookie, taken out of smarm.run's options; the main
-- actor starts the node before anything else runs.
local function node_starter(smarm, opts)
  local node, cookie = opts.node, opts.cookie
  opts.node, opts.cookie = nil, nil
  return function()
    if not node then return end
    local ran, ok, err = pcall(smarm.node.start, { name = node, cookie = cookie })
    if not (ran and ok) then -- the command line's mistake: its text alone (cli.run; the
      -- prompt's error prints by __tostring)
      local text = "-N " .. node .. ": " .. tostring(ran and err or ok)
      error(setmetatable({ cli_error = text }, { __tostring = function() return text end }), 0)
    end
  end
end

-- Runs chunk as the main actor with the script's arguments (the global `arg`, set by main.c
-- like the lua interpreter does); returns its results. opts: smarm.run's options from the
-- command line (schedulers, stack_size; node and cookie: -N, -C).
function cli.run(smarm, chunk, opts)
  local args = _G.arg or { n = 0 }
  local start_node = node_starter(smarm, opts)
  local ok, err = pcall(smarm.run, function()
    start_node()
    return chunk(unpack(args, 1, args.n or #args))
  end, opts)
  -- smarm.run raises the main actor's own error value; its text and traceback are kept aside
  if not ok and err == nil then error(nil, 0) end -- error() without a value: silent, as lua.c
  if not ok and type(err) == "table" and type(err.usage) == "string" then error(err, 0) end
  if not ok and type(err) == "table" and type(err.cli_error) == "string" then
    error(err.cli_error, 0) -- no traceback: nothing of the script ran
  end
  if not ok then error(smarm.last_traceback() or tostring(err), 0) end
end

local repl = require("smarm.repl")

-- The prompt (lua/smarm/console.lua's console.prompt): entries run in an evaluator actor with
-- the process's globals, so they may spawn, send, receive and sleep; on a terminal, lines are
-- edited with history (libedit) and Ctrl-C interrupts the running entry or drops the line being
-- typed. An entry is a line, or the lines of a chunk that continues (`for i = 1, 3 do` ...
-- `end`); `=expr` and expressions print their values; `smarm` is a global.
function cli.prompt(smarm, opts, interactive)
  local start_node = node_starter(smarm, opts)
  return smarm.run(function()
    start_node()
    repl.interactive = interactive
    if rawget(_G, "smarm") == nil then rawset(_G, "smarm", smarm) end -- preloaded, as a global
    local unfinished = require("smarm.console").prompt({
      interactive = interactive, interrupts = interactive,
    })
    if unfinished then io.stderr:write("stdin: unfinished input dropped at the end\n") end
  end, opts)
end

-- `smarm attach PATH` / `smarm -a PATH`: a prompt of the console listening at PATH
-- (lua/smarm/console.lua), in a runtime of one scheduler; on a terminal, Ctrl-C interrupts the
-- running entry. `smarm top PATH`: that console's smarm.top() alone. Exit status 1 when it
-- cannot connect.
function cli.attach(smarm, path, interactive, entries)
  return smarm.run(function()
    local ok, err = require("smarm.console").attach(path, {
      interactive = interactive, interrupts = interactive, entries = entries,
    })
    if not ok then
      error((entries and "top" or "attach") .. ": " .. tostring(err), 0) -- "smarm: attach: ..."
    end
  end, { schedulers = 1 })
end

function cli.top(smarm, path, interactive)
  -- a console's smarm.top clears its client's screen: only a terminal has one
  return cli.attach(smarm, path, interactive,
    { interactive and "smarm.top()" or "smarm.top({ clear = false })" })
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
