-- How many descriptors this process has open, read from /proc/self/fd without a fork
-- (spec/support/posix.lua). Loaded by the specs with dofile("spec/support/fds.lua").
return dofile("spec/support/posix.lua").fd_count
