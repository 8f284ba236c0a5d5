-- The prompt's engine, shared by the smarm executable's own prompt (lua/smarm/cli.lua) and by
-- attached consoles (lua/smarm/console.lua): how entries are read, compiled, run and shown. It
-- knows nothing of terminals or sockets: its callers give it a line reader and a writer.
local repl = {}

-- Whether the executable's own prompt runs on a terminal (set by lua/smarm/cli.lua): smarm.top
-- then clears the screen between its tables.
repl.interactive = false

-- Compiles the text of one entry: "=expr" and expressions return their values (as lua does); a
-- chunk that is not finished yet (its error is at <eof>) asks for more lines. Returns f, or
-- nil and the error, or nil, nil, true for "more". env (optional) becomes f's environment.
function repl.compile(text, chunkname, env)
  if text:sub(1, 1) == "=" then text = text:sub(2) end
  -- an expression's values, through select so that a call in it is no tail call: an error it
  -- raises keeps the entry's line ("console:1: boom")
  local f = loadstring("return select(1, " .. text .. "\n)", chunkname)
  if not f then
    local err
    f, err = loadstring(text, chunkname)
    if not f then
      if err:match("<eof>'?$") then return nil, nil, true end -- stopped short, as lua.c asks
      return nil, err
    end
  end
  if env then setfenv(f, env) end
  return f
end

-- The message handler of an entry: the error and the entry's traceback, without the prompt's
-- own frames (everything from the xpcall that ran the entry on).
function repl.traceback(err)
  local text = debug.traceback(type(err) == "string" and err or tostring(err), 2)
  local cut = text:find("\n%s*%[C%]: in function 'xpcall'")
  return cut and text:sub(1, cut - 1) or text
end

-- tostring(v), or what its __tostring raised, as text: a value that cannot be shown does not
-- end the entry's evaluator.
local function show(v)
  local ok, text = pcall(tostring, v)
  if ok and type(text) == "string" then return text end
  return "(" .. type(v) .. ": its __tostring failed: " .. (ok and "it returned no string"
    or select(2, pcall(tostring, text)) or "?") .. ")"
end

-- What an entry's xpcall gave, as text to show: its values separated by tabs (as print does),
-- or the error with its traceback; "" for no values. Second result: whether it failed.
function repl.format(ok, ...)
  if not ok then return show((...)) .. "\n", true end
  local n = select("#", ...)
  if n == 0 then return "", false end
  local parts = {}
  for i = 1, n do parts[i] = show((select(i, ...))) end
  return table.concat(parts, "\t") .. "\n", false
end

-- Reads entries until read gives nil: read(prompt) -> line or nil, prompt "> " for a new entry
-- and ">> " for a continued one; run(f, text) runs a complete entry; fail(err) reports one
-- that does not compile. Returns the text of an unfinished entry dropped at the end, if any.
function repl.loop(read, run, fail, chunkname, env)
  local text = nil -- the lines of an entry that is not finished yet
  while true do
    local line = read(text and ">> " or "> ")
    if not line then return text end
    text = text and (text .. "\n" .. line) or line
    local f, err, more = repl.compile(text, chunkname, env)
    if not more then
      local entry = text
      text = nil
      if f then run(f, entry) else fail(err) end
    end
  end
end

-- A line reader of the process's standard input for an actor: read(prompt) -> line | nil.
-- On a terminal (interactive) with libedit, lines are edited, with history (smarm.lineedit: a
-- read runs on the IO thread's pool; an actor killed while it reads cancels it), and the second
-- result is true. Otherwise the line is read plainly (the prompt is the caller's to show):
-- input that can keep it waiting (a terminal, a pipe) is read through the IO thread
-- (smarm.fs), so the other actors of its scheduler run on meanwhile; a regular file (or a
-- /dev/stdin that cannot be opened) is read with plain reads of the shared descriptor, which
-- keep its position. One plain reader per VM and run is shared by all who ask (the prompt,
-- smarm.top waiting for Enter): what one read ahead is the next one's. The file is owned by the
-- actor that opened it: when that one ends abnormally (smarm.top's caller killed) the file is
-- closed, and the next to ask opens another.
local shared -- { input = the file or nil, read = fn }
function repl.stdin_reader(smarm, interactive)
  if interactive and smarm.lineedit.available() then
    return smarm.lineedit.read, true
  end
  -- "fs.file (closed)", "fs.file (closed with an earlier run)": open it again
  if shared and not (shared.input and tostring(shared.input):find("(closed", 1, true)) then
    return shared.read, false
  end
  local st, input = smarm.fs.stat("/dev/stdin"), nil
  if st and st.type ~= "file" then input = smarm.fs.open("/dev/stdin", "r") end
  local read = input and function() return input:read("*l") end
    or function() return io.stdin:read("*l") end
  shared = { input = input, read = read }
  return read, false
end

return repl
