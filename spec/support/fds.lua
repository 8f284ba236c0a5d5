-- How many descriptors this process has open (the pid from /proc/self/stat: a shell started by
-- io.popen has its own). Loaded by the specs with dofile("spec/support/fds.lua").
return function()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("*n")
  f:close()
  local p = assert(io.popen("ls /proc/" .. pid .. "/fd | wc -l"))
  local n = tonumber(p:read("*a"))
  p:close()
  return n
end
