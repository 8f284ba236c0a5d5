-- luacheck (Debian's lua-check) over lua/, bench/, spec/ and examples/: run by ctest as
-- <variant>/lint in the plain native builds (CMakeLists.txt), and by hand with `luacheck .`.
std = "luajit"
max_line_length = 120
exclude_files = { "build/**", "deps/**" }
-- spec/**/*_spec.lua get busted's globals from luacheck's own defaults; the stand-in runner
-- defines them.
-- A suite that spec/test_spec.lua runs in a nested busted.
files["spec/fixtures/smarm_test_suite.lua"] = { std = "+busted" }
files["examples/echo_spec.lua"] = { std = "+busted" } -- the README's example spec
files["spec/support/runner.lua"] = { globals = { "describe", "it", "pending", "before_each", "after_each", "assert" } }
