-- Bad targets (a pid or a name expected) and the words their refusal takes, for the specs of
-- the modules that take targets as their own functions' arguments (server, supervisor):
-- collect(fns) calls each function of fns with each bad target, inside a run; check(assert, r,
-- file, nfns) then asserts, with the spec's assert, that each error names the function at the
-- caller's line of that spec file.
local M = {}

M.cases = { { {}, "pid or name expected, got table" },
  { true, "pid or name expected, got boolean" }, { print, "pid or name expected, got function" },
  { nil, "pid or name expected, got nil" }, { "", "a name is 1 to 255 bytes, without NUL" },
  { ("n"):rep(256), "a name is 1 to 255 bytes, without NUL" } }

function M.collect(fns)
  local out = {}
  for fname, f in pairs(fns) do
    for i, bad in ipairs(M.cases) do out[#out + 1] = { fname, i, select(2, pcall(f, bad[1])) } end
  end
  return out
end

function M.check(assert, r, file, nfns) -- (busted's: dofile gives this file the plain one)
  assert.are.equal(nfns * #M.cases, #r)
  local at = "^" .. file:gsub("%p", "%%%0") .. ":(%d+): "
  for _, e in ipairs(r) do
    assert.are.equal(("%s:%d: bad argument #1 to '%s' (%s)"):format(file,
      tonumber(e[3]:match(at)) or -1, e[1], M.cases[e[2]][2]), e[3])
  end
end

return M
