-- The system calls the specs need around their runtimes (a temporary directory, a FIFO, removing
-- a tree, a directory's names, the descriptors open, the descriptor limit, a short sleep), through
-- LuaJIT's FFI rather than a shell: a process that forks after libuv's pool threads exist can
-- leave the child stuck on a futex under qemu-user, hanging the aarch64 run (the specs fork only
-- where starting a program is the point). Loaded with dofile("spec/support/posix.lua"); one
-- table per process.
--
-- The declarations hold on x86-64 and aarch64 Linux alike (glibc, LP64): mode_t and useconds_t
-- are 32 bits, rlim_t 64, RLIMIT_NOFILE is 7. A directory entry is read at its name alone, at
-- byte 19 of struct dirent on both (d_ino 8, d_off 8, d_reclen 2, d_type 1), so that no struct
-- whose layout differs between them is declared.
local KEY = "spec/support/posix.lua"
if package.loaded[KEY] then return package.loaded[KEY] end

local ffi = require("ffi")
-- renamed to names of our own: the specs declare libc functions of their own as they need them
ffi.cdef([[
struct spec_posix_rlimit { uint64_t cur, max; };
long spec_posix_syscall(long number, ...) __asm__("syscall");
int spec_posix_mkdir(const char *path, uint32_t mode) __asm__("mkdir");
int spec_posix_mkfifo(const char *path, uint32_t mode) __asm__("mkfifo");
int spec_posix_unlink(const char *path) __asm__("unlink");
int spec_posix_rmdir(const char *path) __asm__("rmdir");
int spec_posix_getrlimit(int resource, struct spec_posix_rlimit *limit) __asm__("getrlimit");
int spec_posix_usleep(uint32_t usec) __asm__("usleep");
int64_t spec_posix_readlink(const char *path, char *buf, size_t size) __asm__("readlink");
const char *spec_posix_strerror(int errnum) __asm__("strerror");
]])
local C = ffi.C
local DIRENT_NAME, DIRENT_RECLEN = 19, 16
-- Directories are listed with raw system calls (openat, getdents64, close through syscall(2)),
-- which ThreadSanitizer does not see: its libc interceptors treat a descriptor number reused
-- while smarm's IO thread closes sockets as a race with that thread (a spec polling the
-- descriptor count meets it). The numbers are the kernel's, per architecture.
local SYS = ({
  arm64 = { openat = 56, getdents64 = 61, close = 57, O_DIRECTORY = 0x4000 },
  x64 = { openat = 257, getdents64 = 217, close = 3, O_DIRECTORY = 0x10000 },
})[ffi.arch] or error("spec/support/posix.lua: no system call numbers for " .. ffi.arch)
local AT_FDCWD, O_CLOEXEC = -100, 0x80000
local RLIMIT_NOFILE = 7
local ENOENT = 2

local posix = {}

local function failed(what, path)
  error(string.format("%s %s: %s", what, path, ffi.string(C.spec_posix_strerror(ffi.errno()))), 3)
end

-- The names in a directory but . and .., and the descriptor the listing itself used; nil if it
-- cannot be opened.
local function entries(path)
  local long = ffi.typeof("long")
  local fd = tonumber(C.spec_posix_syscall(SYS.openat, long(AT_FDCWD), path,
    long(bit.bor(SYS.O_DIRECTORY, O_CLOEXEC))))
  if fd < 0 then return nil, ffi.errno() end -- syscall(2) returns -1 and sets errno
  local names, buf = {}, ffi.new("uint8_t[?]", 8192)
  while true do
    local n = tonumber(C.spec_posix_syscall(SYS.getdents64, long(fd), buf, long(8192)))
    if n <= 0 then break end
    local at = 0
    while at < n do
      local name = ffi.string(buf + at + DIRENT_NAME)
      if name ~= "." and name ~= ".." then names[#names + 1] = name end
      at = at + ffi.cast("uint16_t *", buf + at + DIRENT_RECLEN)[0]
    end
  end
  C.spec_posix_syscall(SYS.close, long(fd))
  return names, tostring(fd)
end

-- Creates the directory path (mode 0700); raises if it cannot.
function posix.mkdir(path)
  if C.spec_posix_mkdir(path, tonumber("700", 8)) ~= 0 then failed("mkdir", path) end
end

-- A fresh, empty directory under /tmp, at the name os.tmpname made (and it removed first).
function posix.tmpdir()
  local path = os.tmpname()
  os.remove(path)
  posix.mkdir(path)
  return path
end

-- Creates a FIFO at path (mode 0600); raises if it cannot.
function posix.mkfifo(path)
  if C.spec_posix_mkfifo(path, tonumber("600", 8)) ~= 0 then failed("mkfifo", path) end
end

-- Removes path and, if it is a directory, everything in it (as rm -rf: a path that does not exist
-- is no error); raises if something stays.
function posix.remove_tree(path)
  if C.spec_posix_unlink(path) == 0 then return end
  local err = ffi.errno()
  local names = entries(path) -- unlink(2) of a directory fails (EISDIR)
  if not names then
    if err == ENOENT then return end
    ffi.errno(err)
    failed("unlink", path)
  end
  for _, name in ipairs(names) do posix.remove_tree(path .. "/" .. name) end
  if C.spec_posix_rmdir(path) ~= 0 then failed("rmdir", path) end
end

-- How many descriptors this process has open (not counting the listing's own).
function posix.fd_count()
  local names, own = assert(entries("/proc/self/fd"))
  local n = 0
  for _, name in ipairs(names) do
    if name ~= own then n = n + 1 end
  end
  return n
end

-- Waits (outside a runtime: no actor needed) until fd_count() is at most n, or `limit`
-- seconds have passed (a hang guard); returns the count.
function posix.fds_down_to(n, limit)
  local deadline, now = os.time() + limit, posix.fd_count()
  while now > n and os.time() < deadline do
    posix.sleep(0.05)
    now = posix.fd_count()
  end
  return now
end

-- The names in directory path but . and .., in readdir's order; nil if it cannot be listed.
function posix.list(path)
  return (entries(path))
end

-- This process's id (read off /proc/self/stat: no fork, no FFI declaration).
function posix.pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("*n")
  f:close()
  return pid
end

-- Whether there is a file named path, of any type (a socket cannot be opened as a file: its
-- folder is listed instead).
function posix.exists(path)
  local folder, name = path:match("^(.*)/([^/]+)$")
  for _, n in ipairs(posix.list(folder ~= "" and folder or "/") or {}) do
    if n == name then return true end
  end
  return false
end

-- This process's open descriptors as text, one "fd -> what it is" a line (for a failure
-- message, as ls -l /proc/<pid>/fd would give it).
function posix.fd_list()
  local names, own = assert(entries("/proc/self/fd"))
  table.sort(names, function(a, b) return tonumber(a) < tonumber(b) end)
  local buf, lines = ffi.new("char[?]", 4096), {}
  for _, name in ipairs(names) do
    if name ~= own then
      local n = tonumber(C.spec_posix_readlink("/proc/self/fd/" .. name, buf, 4096))
      lines[#lines + 1] = name .. " -> " .. (n >= 0 and ffi.string(buf, n) or "(closed meanwhile)")
    end
  end
  return table.concat(lines, "\n") .. "\n"
end

-- The soft limit on descriptors (math.huge when there is none).
function posix.fd_limit()
  local limit = ffi.new("struct spec_posix_rlimit")
  if C.spec_posix_getrlimit(RLIMIT_NOFILE, limit) ~= 0 then failed("getrlimit", "RLIMIT_NOFILE") end
  if limit.cur == ffi.cast("uint64_t", -1) then return math.huge end
  return tonumber(limit.cur)
end

-- Sleeps s seconds (outside a runtime: inside one, smarm.sleep).
function posix.sleep(s)
  C.spec_posix_usleep(math.floor(s * 1e6))
end

package.loaded[KEY] = posix
return posix
