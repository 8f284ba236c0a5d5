-- smarm.node: the runtime as an Erlang node (src/io/dist.c, src/lua/ldist.c), beside real
-- Erlang nodes on loopback (spec/fixtures/smarm_node_check.erl under `erl`, Debian's
-- erlang-base) and another smarm process. Without erl (or a smarm built without erl_interface)
-- those cases are pending with a SKIP line; the rest still runs.
local smarm = require("smarm")
local server = require("smarm.server")

local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG

local erl = dofile("spec/support/erl.lua")
local own = tostring(io.open("/proc/self/stat"):read("*n")) -- this process's pid: unique names
local COOKIE = "smarm-spec-cookie"
local function name(alive) return alive .. own .. "@localhost" end

-- The argv of an Erlang node named `alive` running smarm_node_check's function.
local function erl_argv(alive, cookie, fn, ...)
  local argv = { "erl", "-sname", name(alive), "-setcookie", cookie, "-noshell",
    "-pa", erl.compile("smarm_node_check"), "-run", "smarm_node_check", fn }
  for _, a in ipairs({ ... }) do argv[#argv + 1] = a end
  return argv
end

local function skip_without_erl()
  if not erl.have then
    pending(erl.SKIP)
    return true
  end
  if not smarm.node.available() then
    pending("SKIP: this smarm was built without erl_interface (Debian: erlang-dev)")
    return true
  end
  erl.compile("smarm_node_check") -- here, outside the run: erlc would hold an actor's scheduler
  return false
end

-- Starts `erl ... serve` as a live program and waits for its "ready".
local function start_server(alive)
  local proc = assert(smarm.process.spawn(erl_argv(alive, COOKIE, "serve"), { group = true }))
  proc.stdout:settimeout(HANG)
  local line, err = proc.stdout:receive("*l")
  assert(line == "ready", "erl serve: " .. tostring(line or err))
  return proc
end

describe("smarm.node", function()
  it("is no node until started, and says what cannot go", function()
    local r = smarm.run(function()
      local out = { self = smarm.node.self(), nodes = #smarm.node.nodes() }
      out.send = select(2, pcall(smarm.send, { "echo", "erl@localhost" }, 1))
      -- a pid of another node, decoded from the bytes Erlang makes: dropped, as to a dead actor
      local pid = smarm.term.decode("\131\88\119\3x@y\0\0\0\9\0\0\0\0\0\0\0\1")
      out.is_pid = smarm.is_pid(pid)
      out.dropped = pcall(smarm.send, pid, "lost")
      out.monitor = select(2, pcall(function() return smarm.monitor(pid) end))
      out.bad_name = select(2, pcall(smarm.node.start, { name = "nohost", cookie = "c" }))
      out.no_table = select(2, pcall(smarm.node.start, "x@y"))
      out.bad_cookie = select(2, pcall(smarm.node.start, { name = "a@b", cookie = "" }))
      out.connect = { smarm.node.connect("erl@localhost") }
      return out
    end)
    assert.is_nil(r.self)
    assert.are.equal(0, r.nodes)
    assert.are.equal("smarm.send: this runtime is not a node (smarm.node.start)", r.send)
    assert.is_true(r.is_pid)
    assert.is_true(r.dropped)
    assert.are.equal("smarm.monitor: this runtime is not a node (smarm.node.start)", r.monitor)
    assert.are.equal("smarm.node.start: a node name is 'alive@host', got 'nohost'", r.bad_name)
    assert(r.no_table:match("table expected"), r.no_table)
    assert.are.equal("smarm.node.start: a cookie is 1 to 255 bytes, no zero byte", r.bad_cookie)
    assert.is_nil(r.connect[1])
    assert.are.equal(smarm.node.available() and "this runtime is not a node (smarm.node.start)"
      or "this smarm was built without erl_interface (Debian: erlang-dev)", r.connect[2])
  end)

  -- smarm.call's {name, node} was checked by the monitor init.lua places: its errors named
  -- smarm.monitor, at a line of init.lua. Checked before whether this runtime is a node.
  it("refuses a bad {name, node} in the words of the function the user called", function()
    local pid = "\131\88\119\3x@y\0\0\0\9\0\0\0\0\0\0\0\1" -- another node's
    local bads = {
      { { "bad\255", "n@h" }, "the name of {name, node} is not an atom: not UTF-8" },
      { { "", "n@h" }, "the name of {name, node} is empty" },
      { { "x", "nohost" }, "the node of {name, node} is no node name (alive@host): 'nohost'" },
      { { "x", "\255@h" }, "the node of {name, node} is not an atom: not UTF-8" },
      { { {}, "n@h" }, "pid or name expected, got table" },
      { { "x", "n@h" }, false }, -- well formed: this runtime is no node
      { pid, false },
    }
    local calls = {
      ["smarm.send"] = function(t) local v = smarm.send(t, 1); return v end,
      ["smarm.call"] = function(t) local v = smarm.call(t, 1); return v end,
      ["smarm.monitor"] = function(t) local v = smarm.monitor(t); return v end,
      ["server.call"] = function(t) local v = server.call(t, 1); return v end,
    }
    local r = smarm.run(function()
      local out = {}
      for fname, f in pairs(calls) do
        out[fname] = {}
        for i, bad in ipairs(bads) do
          local t = bad[1] == pid and smarm.term.decode(pid) or bad[1]
          local ok, err = pcall(f, t)
          out[fname][i] = ok or err
        end
      end
      return out
    end)
    for fname, errors in pairs(r) do
      for i, bad in ipairs(bads) do
        local want
        if bad[2] then -- server.call's own words are smarm.call's
          want = "bad argument #1 to '" .. fname:match("%a+$") .. "' (" .. bad[2] .. ")"
        elseif bad[1] == pid and fname == "smarm.send" then
          want = true -- dropped, as to a dead actor
        else
          want = fname .. ": this runtime is not a node (smarm.node.start)"
        end
        local got = errors[i]
        if type(got) == "string" then
          local at_caller -- the caller's line, not one of init.lua
          got, at_caller = got:gsub("^spec/node_spec%.lua:%d+: ", "")
          assert.are.equal(1, at_caller, fname .. " " .. i .. ": " .. errors[i])
        end
        assert.are.equal(want, got, fname .. " " .. i)
      end
    end
  end)

  it("is called by Erlang by name and by pid, terms and order kept", function()
    if skip_without_erl() then return end
    local me = name("smarma")
    local res, err = smarm.run(function()
      assert(smarm.node.start({ name = me, cookie = COOKIE }))
      assert.are.equal(me, smarm.node.self())
      local echo = smarm.spawn_opt({ name = "echo" }, function()
        local count, in_order = 0, true
        while true do
          local m = smarm.receive()
          if m[1] == smarm.atom("seq") then
            count = count + 1
            in_order = in_order and m[2] == count
          elseif m[1] == smarm.atom("done") then
            smarm.send(m[2], smarm.tuple({ smarm.atom("count"), count, in_order }))
          else
            smarm.send(m[1], smarm.tuple({ n = 2, smarm.self(), m[2] })) -- m[2] may be nil
          end
        end
      end)
      local add = smarm.atom("add")
      local counter = assert(server.start({
        init = function() return "ok", 0 end,
        handle_call = function(req, _, n)
          assert(req[1] == add)
          return "reply", n + req[2], n + req[2]
        end,
        handle_cast = function(req, n) return "noreply", n + req[2] end,
      }, nil, { name = "counter" }))
      local out, e = smarm.process.run(erl_argv("cla", COOKIE, "client", me, "7", "2000", "100000"),
        { timeout = HANG })
      smarm.kill(echo)
      server.stop(counter)
      return out, e
    end)
    assert(res, "erl client: " .. tostring(err))
    assert.are.equal("done 2000\n", res.stdout)
  end)

  it("calls Erlang by name, and is refused with another cookie or a taken name", function()
    if skip_without_erl() then return end
    local srv = name("srvb")
    local r = smarm.run(function()
      local proc = start_server("srvb")
      local out = {}
      out.taken = { smarm.node.start({ name = srv, cookie = COOKIE }) }
      assert(smarm.node.start({ name = name("smarmb"), cookie = COOKIE }))
      -- the node there, dialled by another name for its host: refused, as Erlang refuses it
      out.misnamed = { smarm.node.connect((srv:gsub("@localhost$", "@127.0.0.1"))) }
      -- (Erlang's net_kernel may still hold the refused dial as pending, and answer the next
      -- one nok_pending, which smarm takes for a dial of its own crossing ours: then again)
      local deadline = smarm.now() + 60
      repeat
        out.connected = { smarm.node.connect(srv) }
      until out.connected[1] or smarm.now() > deadline
        or not tostring(out.connected[2]):find("connecting to us", 1, true)
      out.nodes = smarm.node.nodes()
      local value = smarm.tuple({ smarm.atom("ok"), { 1, 2.5, "three" }, smarm.map({ a = true }) })
      smarm.send({ "echo", srv }, smarm.tuple({ smarm.self(), value }))
      local back = guard.receive("echo")
      out.echoed = back[1] == smarm.atom("ok") and back[2][3] == "three" and back[3].a == true
      for i = 1, 100000 do smarm.send({ "sink", srv }, smarm.tuple({ smarm.atom("seq"), i })) end
      smarm.send({ "sink", srv }, smarm.tuple({ smarm.atom("count"), smarm.self() }))
      local count = guard.receive("count")
      out.count, out.in_order = count[1], count[2]
      out.sum = smarm.call({ "calc", srv }, smarm.tuple({ smarm.atom("add"), 2, 3 }))
      out.no_server = { smarm.call({ "nobody", srv }, 1) } -- noproc: the name's monitor says
      out.silent = { smarm.call({ "sink", srv }, 1, 0.2) } -- it never answers calls
      local echoed = smarm.call({ "calc", srv }, nil) -- still a 3-tuple: {'$gen_call', From, nil}
      out.nil_request = echoed and echoed[1] == smarm.atom("echo") and echoed.n == 2
      -- node monitors: three, one taken back, then the node dies: two nodedowns
      local function nodedown(m) return type(m) == "table" and m.smarm == "nodedown" end
      for _ = 1, 3 do assert(smarm.node.monitor(srv)) end
      assert(smarm.node.monitor(srv, false))
      proc:kill("SIGKILL")
      proc:wait(HANG)
      out.down = { guard.receive("a nodedown", nodedown).node, guard.receive("another", nodedown).node }
      out.extra = smarm.receive(nodedown, 0.3)
      out.after = smarm.node.nodes()
      -- a node that cannot be reached: nodedown at once
      assert(smarm.node.monitor(name("nobody")))
      out.unreachable = guard.receive("the unreachable nodedown", nodedown).node
      return out
    end)
    assert.is_nil(r.taken[1])
    assert.are.equal("epmd refused the name " .. srv .. " (taken by another node?)", r.taken[2])
    assert.are.same({ nil, "cannot connect to " .. srv:gsub("@localhost$", "@127.0.0.1")
      .. " (the node there is " .. srv .. ")" }, r.misnamed)
    assert.are.same({ true }, r.connected)
    assert.are.same({ srv }, r.nodes)
    assert.is_true(r.echoed)
    assert.are.equal(100000, r.count)
    assert.is_true(r.in_order)
    assert.are.equal(5, r.sum)
    assert.are.same({ nil, "noproc" }, r.no_server)
    assert.are.same({ nil, "timeout" }, r.silent)
    assert.is_true(r.nil_request)
    assert.are.same({ srv, srv }, r.down)
    assert.is_nil(r.extra)
    assert.are.same({}, r.after)
    assert.are.equal(name("nobody"), r.unreachable)

    local wrong = smarm.run(function()
      local proc = start_server("srvc")
      assert(smarm.node.start({ name = name("smarmc"), cookie = "not-the-cookie" }))
      local out = { smarm.node.connect(name("srvc")) }
      proc:kill("SIGKILL")
      proc:wait(HANG)
      return out
    end)
    assert.is_nil(wrong[1])
    assert.are.equal("cannot connect to " .. name("srvc") .. " (refused: is the cookie the same?)",
      wrong[2])
  end)

  it("links and monitors Erlang processes both ways, noconnection when the node dies", function()
    if skip_without_erl() then return end
    local srv = name("srvl")
    local A = smarm.atom
    local r = smarm.run(function()
      local proc = start_server("srvl")
      assert(smarm.node.start({ name = name("smarml"), cookie = COOKIE }))
      local out = {}
      local function victim()
        smarm.send({ "maker", srv }, smarm.tuple({ A("victim"), smarm.self() }))
        return guard.receive("a victim", function(m) return m[1] == A("victim") end)[2]
      end
      -- we monitor and link to (trapping exits) a process that exits with {boom, 42}
      smarm.trap_exit(true)
      local v = victim()
      local ref = smarm.monitor(v)
      smarm.link(v)
      smarm.send(v, smarm.tuple({ A("exit"), smarm.tuple({ A("boom"), 42 }) }))
      local down = guard.receive("its DOWN", function(m) return m.smarm == "DOWN" end)
      local exit = guard.receive("its EXIT", function(m) return m.smarm == "EXIT" end)
      out.down = down.ref == ref and down.pid == v and down.reason[1] == A("boom")
        and down.reason[2]
      out.exit = exit.pid == v and exit.reason[1] == A("boom") and exit.reason[2]
      out.dead_call = { smarm.call(v, 1) } -- it is gone: noproc, at once
      out.link_name = select(2, pcall(smarm.link, { "maker", srv })) -- Erlang links pids only
      -- a monitor by name: {Name, Node} in its DOWN
      local by_name = smarm.monitor({ "nobody", srv })
      local named = guard.receive("the name's DOWN", function(m)
        return m.smarm == "DOWN" and m.ref == by_name end)
      out.named = { named.pid[1], named.pid[2], named.reason }
      -- a demonitor and an unlink: nothing comes when it ends
      v = victim()
      ref = smarm.monitor(v)
      smarm.link(v)
      out.demonitor = smarm.demonitor(ref)
      smarm.unlink(v)
      smarm.send(v, smarm.tuple({ A("exit"), A("gone") }))
      -- an actor that does not trap exits dies of a link's abnormal exit, not of normal
      local function linked_dies(reason)
        local w = victim()
        local pid, mref = smarm.spawn_monitor(function()
          smarm.link(w)
          smarm.send(w, smarm.tuple({ A("exit"), reason }))
          smarm.sleep(HANG)
        end)
        local m = guard.receive("a linked actor's DOWN", function(x)
          return x.smarm == "DOWN" and x.ref == mref end)
        return m.reason, pid
      end
      out.shutdown = linked_dies(A("shutdown")) == A("shutdown")
      -- Erlang watches one of ours (a monitor and a link), which ends with {bye, 7}
      local ours = smarm.spawn(function()
        smarm.receive()
        smarm.exit(smarm.tuple({ A("bye"), 7, "text", { 1, 2 } }))
      end)
      smarm.send({ "maker", srv }, smarm.tuple({ A("watch"), ours, smarm.self() }))
      guard.receive("watching", function(m) return m[1] == A("watching") end)
      smarm.send(ours, "go")
      local watched = guard.receive("watched", function(m) return m[1] == A("watched") end)
      out.watched = { smarm.term.encode(watched[2]), smarm.term.encode(watched[3]) }
      -- one that is already gone: noproc for both
      smarm.send({ "maker", srv }, smarm.tuple({ A("watch"), ours, smarm.self() }))
      watched = guard.receive("watched", function(m) return m[1] == A("watched") end)
      out.gone = { watched[2], watched[3] }
      -- Erlang monitors one of ours by name: its DOWN names {Name, Node}, as Erlang's do
      smarm.spawn_opt({ name = "watched" }, function()
        smarm.receive()
        smarm.exit(A("bye"))
      end)
      smarm.send({ "maker", srv }, smarm.tuple({ A("watch_name"), A("watched"),
        A(smarm.node.self()), smarm.self() })) -- it monitors the name, then sends it go
      watched = guard.receive("watched by name", function(m) return m[1] == A("watched_name") end)
      out.watched_name = { smarm.term.encode(watched[2]), watched[3] }
      out.named_object = smarm.term.encode(smarm.tuple({ A("watched"), A(smarm.node.self()) }))
      -- the node dies: our links and monitors of its processes end with noconnection
      v = victim()
      ref = smarm.monitor(v)
      smarm.link(v)
      proc:kill("SIGKILL")
      proc:wait(HANG)
      down = guard.receive("a DOWN", function(m) return m.smarm == "DOWN" end)
      exit = guard.receive("an EXIT", function(m) return m.smarm == "EXIT" end)
      out.noconnection = { down.ref == ref and down.pid == v and down.reason,
        exit.pid == v and exit.reason }
      out.extra = smarm.receive(function(m) return m.smarm == "DOWN" or m.smarm == "EXIT" end, 0.3)
      return out
    end)
    assert.are.equal(42, r.down)
    assert.are.equal(42, r.exit)
    assert.are.same({ nil, "noproc" }, r.dead_call)
    assert(r.link_name:find("pid or name expected, got table", 1, true), r.link_name)
    assert.are.same({ A("nobody"), A(srv), "noproc" }, r.named)
    assert.is_true(r.demonitor)
    assert.is_true(r.shutdown)
    local reason = smarm.term.encode(smarm.tuple({ A("bye"), 7, "text", { 1, 2 } }))
    assert.are.same({ reason, reason }, r.watched)
    assert.are.same({ A("noproc"), A("noproc") }, r.gone)
    assert.are.same({ r.named_object, A("bye") }, r.watched_name)
    assert.are.same({ "noconnection", "noconnection" }, r.noconnection)
    assert.is_nil(r.extra)
  end)

  it("sends reasons to Erlang as the terms smarm.term.encode makes", function()
    local A = smarm.atom
    local values = { "text", 42, -7, 2.5, 1e15, true, false, A("ok"), {}, { 1, 2, 3 },
      { a = 1, b = { "x" } }, smarm.tuple({ A("error"), "why", { 1, { 2 } } }),
      smarm.tuple({ n = 3, 1 }), smarm.map({ 1, 2 }), { [1] = "a", [3] = "c" } }
    local r = smarm.run(function()
      local out = { same = {} }
      for i, v in ipairs(values) do
        out.same[i] = smarm.term.encode(v) == smarm.node._reason_term(v) or smarm.node._reason_term(v)
      end
      out.nan = smarm.node._reason_term({ 0 / 0 })
      out.bad_n = {} -- a tuple's n that smarm.term.encode refuses: no term either
      for i, n in ipairs({ 2 ^ 24, -1, 1.5, 0 / 0 }) do
        out.bad_n[i] = smarm.node._reason_term(smarm.tuple({ n = n, 1 })) == nil
      end
      -- a map with a key twice (distinct Lua keys of one term), which Erlang refuses: none
      local t = smarm.tuple
      out.dup = { smarm.node._reason_term({ [t({ 1 })] = 1, [t({ 1 })] = 2 }) == nil,
        smarm.node._reason_term({ a = { a = 1, [smarm.binary("a")] = 2 } }) == nil }
      -- keys that are maps with the same pairs set in different orders are one term too (maps
      -- inside a key go in the order of their keys' bytes), and go as smarm.term.encode's bytes
      local first, second = { z = { m = 1, n = 2 } }, { z = { n = 2 } }
      second.z.m = 1
      for i = 1, 20 do first["k" .. i] = i end
      for i = 20, 1, -1 do second["k" .. i] = i end
      out.dup[3] = smarm.node._reason_term({ [first] = 1, [second] = 2 }) == nil
      -- a key twice inside a map that is a key: its pairs are put in order, and the check must
      -- read the keys where they are after that (it read the places they had before: a key
      -- twice went to Erlang in most of these)
      out.dup[4] = true
      for i = 1, 40 do
        local inner = { ["s" .. i] = string.rep("w", i % 17), ["t" .. i] = 3 }
        inner[t({ 1 })] = string.rep("v", i % 13)
        inner[t({ 1 })] = 2
        out.dup[4] = out.dup[4] and smarm.node._reason_term({ [inner] = i }) == nil
      end
      out.sorted = smarm.node._reason_term({ [first] = 1 }) == smarm.term.encode({ [first] = 1 })
      local distinct = { [t({ 1 })] = 1, [t({ 2 })] = 2, [{ 1 }] = 3, a = 4 }
      out.distinct = smarm.node._reason_term(distinct) == smarm.term.encode(distinct)
      local deep = "bottom" -- 150 levels: each level's bytes read once per level above it
      for _ = 1, 150 do deep = { cause = deep, { 1 } } end
      out.deep = smarm.node._reason_term(deep) == smarm.term.encode(deep)
      out.normal = smarm.node._reason_term("normal") -- a reason with a code: no term made
      return out
    end)
    for i = 1, #values do assert.is_true(r.same[i]) end
    assert.is_nil(r.nan)
    assert.are.same({ true, true, true, true }, r.bad_n)
    assert.are.same({ true, true, true, true }, r.dup)
    assert.is_true(r.sorted)
    assert.is_true(r.distinct)
    assert.is_true(r.deep)
    assert.are.equal(0, r.normal)
  end)

  -- The node's packet check walks a reason from another node, but the decoder in the receiving
  -- VM may still refuse it (here: too little C stack left for its nesting) or run out of
  -- memory. It raised out of the receive that took the DOWN (or EXIT, or a call's DOWN), which
  -- was lost; now the reason is { smarm = "bad_term", reason = <why> }, as a message from a node
  -- that cannot be decoded is.
  it("gives a DOWN whose reason it cannot decode the reason bad_term, not an error", function()
    if skip_without_erl() then return end
    local srv = name("srvb")
    local A = smarm.atom
    local r = smarm.run(function()
      local proc = start_server("srvb")
      assert(smarm.node.start({ name = name("smarmb"), cookie = COOKIE }))
      smarm.send({ "maker", srv }, smarm.tuple({ A("victim"), smarm.self() }))
      local v = guard.receive("a victim", function(m) return m[1] == A("victim") end)[2]
      local reason = 1 -- 190 tuples deep: within the 200 levels that a packet may nest
      for _ = 1, 190 do reason = smarm.tuple({ reason }) end
      local ref = smarm.monitor(v)
      -- here: below, the encoder would refuse it (it keeps the same reserve of C stack)
      smarm.send(v, smarm.tuple({ A("exit"), reason }))
      -- f runs in the innermost of nested gsub callbacks, which stop with 64 KiB of C stack left
      -- (docs/api.md, "C stack"): the rest of a level of them is too little for 190 levels of
      -- decoding, which keep those 64 KiB too. The DOWN waits undecoded until it is taken there.
      local function deepest(f)
        local result
        if not pcall(string.gsub, "x", "x", function() result = { deepest(f) } end) then
          return f()
        end
        return unpack(result)
      end
      local ok, down = deepest(function()
        return pcall(smarm.receive, function(m) return m.smarm == "DOWN" and m.ref == ref end,
          HANG)
      end)
      -- A monitor by name, { Name, Node }, whose DOWN (noproc) names it: a flat tuple, which
      -- decodes there (its one level within the reserve); the decode raised there, unprotected.
      local by_name = smarm.monitor({ "nobody", srv })
      local ok2, down2 = deepest(function()
        return pcall(smarm.receive, function(m) return m.smarm == "DOWN" and m.ref == by_name end,
          HANG)
      end)
      proc:kill("SIGKILL")
      proc:wait(HANG)
      return { ok, ok and down.reason or down, ok and down.pid == v, ok2,
        ok2 and { down2.pid[1], down2.pid[2], down2.reason } or down2 }
    end)
    assert(r[4], r[5])
    assert.are.same({ A("nobody"), A(srv), "noproc" }, r[5])
    assert(r[1], r[2])
    assert.are.equal("bad_term", r[2].smarm)
    local too_deep = "term nested too deeply for the actor's C stack at byte %d+"
    assert.matches("^smarm.term.decode: " .. too_deep .. "$", r[2].reason)
    assert.is_true(r[3])
  end)

  it("links to a pid of this node's earlier run: an exit signal noproc naming it", function()
    if skip_without_erl() then return end
    local r = smarm.run(function()
      assert(smarm.node.start({ name = name("smarmh"), cookie = COOKIE }))
      -- this node's pid with another creation: what a pid from before a restart looks like
      local stale = smarm.term.decode(smarm.term.encode(smarm.self()):sub(1, -5) .. "\0\0\0\1")
      local out = {}
      smarm.trap_exit(true)
      smarm.link(stale)
      local ok, m = pcall(guard.receive, "the EXIT", function(x) return x.smarm == "EXIT" end)
      out.exit = ok and { m.pid == stale, m.reason } or { m }
      out.extra = smarm.receive(function(x) return x.smarm == "EXIT" end, 0.2)
      smarm.trap_exit(false)
      local _, ref = smarm.spawn_monitor(function() -- one that does not trap exits dies of it
        smarm.link(stale)
        smarm.sleep(HANG)
      end)
      out.dies = guard.receive("its DOWN", function(x) return x.ref == ref end).reason
      return out
    end)
    assert.are.same({ true, "noproc" }, r.exit)
    assert.is_nil(r.extra)
    assert.are.equal("noproc", r.dies)
  end)

  -- A pid term of this node carries any 32 bits as its ID and serial; the decoder made a smarm
  -- pid of each, whose intern key (lpid.c, pid_key: the bits as a double, with 1 added to the
  -- scheduler field) is NaN for the fields 2046 and 4094 ("table index is NaN" out of decode),
  -- negative past 2046 (the keys of refs and timers), and 4095 is the field of another node's
  -- process (smarm.h, SMARM_PID_SCHED_REMOTE); a monitor of the field 1024 got no DOWN. No
  -- runtime gives out such a pid: it names nobody.
  it("decodes a pid of this node with a scheduler field no runtime has as naming nobody", function()
    if skip_without_erl() then return end
    local fields = { 2046, 4094, 1024, 2047, 3122, 4095 }
    local r = smarm.run(function()
      assert(smarm.node.start({ name = name("smarmk"), cookie = COOKIE }))
      local me = smarm.term.encode(smarm.self()) -- NEW_PID_EXT: node, ID, serial, creation
      local out = {}
      for _, field in ipairs(fields) do
        -- the serial is the pid's high 32 bits: the scheduler field's 12, then the slot's 20
        local bytes = me:sub(1, -9) .. string.char(math.floor(field / 16), field % 16 * 16, 0, 0)
          .. me:sub(-4)
        local ok, pid = pcall(smarm.term.decode, bytes)
        if not ok then -- (the first of them, before any monitor that would wait for good)
          out[#out + 1] = pid
          break
        else
          local ref = smarm.monitor(pid)
          local down = guard.receive("its DOWN", function(m) return m.ref == ref end)
          -- alive says false, as Erlang's is_process_alive of a dead local pid (it raised "a pid
          -- of another node")
          local alive = { pcall(smarm.alive, pid) }
          -- info has nothing to say, and a timer for it sends nothing (both raised "a pid of
          -- another node", at a line of init.lua for info)
          local info = { pcall(smarm.info, pid) }
          local timer = { pcall(smarm.send_after, 0, pid, "x") }
          out[#out + 1] = { smarm.term.encode(pid) == bytes, pid ~= smarm.self(), down.reason,
            down.pid == pid, alive[1], alive[2], info[1], info[2], timer[1],
            timer[1] and smarm.cancel_timer(timer[2]) }
        end
      end
      return out
    end)
    for i in ipairs(fields) do
      assert.are.same({ true, true, "noproc", true, true, false, true, nil, true, false }, r[i],
        "field " .. fields[i])
    end
  end)

  -- A ref term of this node carries any 64 bits; the decoder made a smarm ref of each, whose
  -- intern key (lpid.c, ref_key: minus the number, as a double) is exact only below 2^53: two
  -- such refs above it decoded as one value.
  it("decodes a ref of this node that it never made as an opaque ref", function()
    if skip_without_erl() then return end
    local r = smarm.run(function()
      assert(smarm.node.start({ name = name("smarml"), cookie = COOKIE }))
      local me = smarm.term.encode(smarm.ref()) -- NEWER_REFERENCE: node, creation, 3 numbers
      local function ref_of(low, high)
        return me:sub(1, -13) .. string.char(0, 0, 0, low, math.floor(high / 2 ^ 24),
          math.floor(high / 2 ^ 16) % 256, math.floor(high / 256) % 256, high % 256, 0, 0, 0, 0)
      end
      local a, b = ref_of(0, 2 ^ 21), ref_of(1, 2 ^ 21) -- 2^53 and 2^53 + 1
      local ra, rb = smarm.term.decode(a), smarm.term.decode(b)
      return { ra ~= rb, smarm.term.encode(ra) == a, smarm.term.encode(rb) == b,
        smarm.term.decode(me) ~= ra }
    end)
    assert.are.same({ true, true, true, true }, r)
  end)

  it("takes another node's registered names only as atoms", function()
    if skip_without_erl() then return end
    local nobody = name("nobody")
    local euro100, euro255 = ("\226\130\172"):rep(100), ("\226\130\172"):rep(255)
    local r = smarm.run(function()
      assert(smarm.node.start({ name = name("smarmi"), cookie = COOKIE }))
      local out = {}
      for _, fname in ipairs({ "send", "monitor" }) do
        local f = smarm[fname]
        out[fname] = {
          select(2, pcall(f, { "\255", nobody }, 1)),
          select(2, pcall(f, { ("a"):rep(256), nobody }, 1)),
          select(2, pcall(f, { "x", "\255@localhost" }, 1)),
        }
      end
      out.send_long = pcall(smarm.send, { euro255, nobody }, 1) -- a legal atom: it goes
      local ref = smarm.monitor({ euro100, nobody }) -- 300 bytes: fits
      local down = guard.receive("its DOWN", function(m) return m.ref == ref end)
      out.down = { down.pid[1] == smarm.atom(euro100), down.reason }
      out.monitor_long = select(2, pcall(smarm.monitor, { euro255, nobody }))
      out.call_long = select(2, pcall(smarm.call, { euro255, nobody }, 1)) -- its monitor's words
      return out
    end)
    for _, fname in ipairs({ "send", "monitor" }) do
      local pre = "bad argument #1 to '" .. fname .. "' ("
      assert.are.same({ pre .. "the name of {name, node} is not an atom: not UTF-8)",
        pre .. "the name of {name, node} is not an atom: more than 255 characters)",
        pre .. "the node of {name, node} is not an atom: not UTF-8)" }, r[fname])
    end
    assert.is_true(r.send_long)
    assert.are.same({ true, "noconnection" }, r.down)
    for _, fname in ipairs({ "monitor", "call" }) do
      assert.are.equal(("bad argument #1 to '%s' (the name and node of {name, node} have %d "
        .. "bytes together, more than the 510 a monitor of another node's name takes)")
        :format(fname, #euro255 + #nobody), r[fname .. "_long"])
    end
  end)

  it("starts once, and gives programs it starts none of its sockets", function()
    if skip_without_erl() then return end
    local r = smarm.run(function()
      local function fds() -- how many sockets a program started now holds beyond 0-2
        local res = assert(smarm.process.run({ "sh", "-c",
          "cd /proc/$$/fd && for f in *; do [ $f -gt 2 ] && readlink $f; done; true" }))
        local n = 0
        for _ in res.stdout:gmatch("socket:") do n = n + 1 end
        return n
      end
      local out = { before = fds() }
      local me = smarm.self()
      for i = 1, 2 do -- two at once: one becomes the node
        smarm.spawn(function()
          smarm.send(me, { i, smarm.node.start({ name = name("smarmf"), cookie = COOKIE }) })
        end)
      end
      local a, b = guard.receive("a start"), guard.receive("the other start")
      out.started = (a[2] and 1 or 0) + (b[2] and 1 or 0)
      out.refused = a[2] and b[3] or a[3]
      out.again = select(2, smarm.node.start({ name = name("smarmg"), cookie = COOKIE }))
      out.after = fds()
      return out
    end)
    assert.are.equal(1, r.started)
    assert(r.refused == "this runtime is becoming a node already" or
      r.refused == "this runtime is already the node " .. name("smarmf"), r.refused)
    assert.are.equal("this runtime is already the node " .. name("smarmf"), r.again)
    assert.are.equal(r.before, r.after)
  end)

  it("talks to another smarm node", function()
    if skip_without_erl() then return end
    local other, me = name("smarmd"), name("smarme")
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(([[
      local smarm = require("smarm")
      assert(smarm.node.start({ name = %q, cookie = %q }))
      local sum = 0
      assert(require("smarm.server").start({
        init = function() return "ok" end,
        handle_call = function(n) sum = sum + n return "reply", sum end,
      }, nil, { name = "adder" }))
      smarm.register("écho", smarm.self()) -- a name beyond ASCII: UTF-8 both ways
      smarm.spawn_opt({ name = "victim" }, function() -- tells who it is, then ends with
        -- {stopped, 1} when told
        local m = smarm.receive()
        smarm.send(m[1], smarm.self())
        smarm.receive()
        smarm.exit(smarm.tuple({ smarm.atom("stopped"), 1 }))
      end)
      print("ready")
      io.stdout:flush()
      while true do
        local m = smarm.receive(120)
        if not m or m == smarm.atom("stop") then break end
        smarm.send(m[1], smarm.tuple({ smarm.node.self(), m[2] }))
      end
    ]]):format(other, COOKIE))
    f:close()
    local r = smarm.run(function()
      local exe = {}
      for word in os.getenv("SMARM_EXE"):gmatch("%S+") do exe[#exe + 1] = word end
      exe[#exe + 1] = script
      local proc = assert(smarm.process.spawn(exe))
      proc.stdout:settimeout(HANG)
      assert.are.equal("ready", proc.stdout:receive("*l"))
      assert(smarm.node.start({ name = me, cookie = COOKIE }))
      local got = {}
      for i = 1, 100 do
        smarm.send({ "écho", other }, smarm.tuple({ smarm.self(), { i, smarm.self() } }))
        local m = guard.receive("echo from the other smarm")
        got[i] = m[1] == other and m[2][1] == i and m[2][2] == smarm.self()
      end
      local sums = { smarm.call({ "adder", other }, 2), smarm.call({ "adder", other }, 3) }
      -- a monitor and a link (trapping exits) across: its reason comes back as sent
      smarm.trap_exit(true)
      smarm.send({ "victim", other }, smarm.tuple({ smarm.self() }))
      local victim = guard.receive("the victim's pid")
      local ref = smarm.monitor(victim)
      smarm.link(victim)
      smarm.send(victim, "die")
      local down = guard.receive("its DOWN", function(m) return m.smarm == "DOWN" end)
      local exit = guard.receive("its EXIT", function(m) return m.smarm == "EXIT" end)
      local ties = { down.ref == ref and down.pid == victim and down.reason[1],
        exit.pid == victim and exit.reason[2] }
      smarm.send({ "écho", other }, smarm.atom("stop"))
      local status = proc:wait(HANG)
      return { got = got, sums = sums, ties = ties, status = status and status.status }
    end)
    os.remove(script)
    for i = 1, 100 do assert.is_true(r.got[i], "message " .. i) end
    assert.are.same({ 2, 5 }, r.sums)
    assert.are.same({ smarm.atom("stopped"), 1 }, r.ties)
    assert.are.equal(0, r.status)
  end)

  teardown(erl.clean)
end)
