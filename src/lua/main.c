/*
** The smarm executable: LuaJIT with smarm built in, running a script (or code, or a prompt) as
** the main actor of a runtime.
**
**   smarm [-s N] script.lua [args...]   run the script; `arg` as the lua interpreter sets it
**   smarm [-s N] -e 'code' [args...]    run code
**   smarm [-s N]                        a prompt whose lines run in the main actor
**   smarm -n script.lua [args...]       plain mode: no runtime is started, the script calls
**                                       smarm.run itself (benchmarks use this to run several
**                                       configurations, each with its own scheduler count)
**   smarm -v                            versions
**
** Exit status: 0, or 1 with the error and its traceback on stderr (2 for bad usage).
*/
#define _GNU_SOURCE
#include "lsmarm.h"
#include "smarm.h"

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
#include <uv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SMARM_LUA_DIR
#define SMARM_LUA_DIR "lua"
#endif

/* Runs in the caller's VM: (smarm, chunk, schedulers, nargs) -> results of the main actor. */
static const char runner[] =
  "local smarm, chunk, schedulers = ...\n"
  "local opts = { schedulers = schedulers }\n"
  "local args = _G.arg or { n = 0 }\n"
  "return smarm.run(function() return chunk(unpack(args, 1, args.n or #args)) end, opts)\n";

/* The prompt: every line runs in the main actor, so it may spawn, send, receive and sleep. Input
** that can keep it waiting (a terminal, a pipe) is read through the IO thread (smarm.fs), so the
** other actors of scheduler 1 run on meanwhile; a regular file (or a /dev/stdin that cannot be
** opened) is read with plain reads of the shared descriptor, which keep its position. */
static const char prompt[] =
  "local smarm, schedulers, interactive = ...\n"
  "local function show(ok, ...)\n"
  "  if not ok then io.stderr:write(tostring((...)), '\\n')\n"
  "  elseif select('#', ...) > 0 then print(...) end\n"
  "end\n"
  "return smarm.run(function()\n"
  "  local st, input, pending = smarm.fs.stat('/dev/stdin'), nil, ''\n"
  "  if st and st.type ~= 'file' then input = smarm.fs.open('/dev/stdin', 'r') end\n"
  "  local function read_line()\n"
  "    if not input then return io.stdin:read('*l') end\n"
  "    while true do\n"
  "      local at = pending:find('\\n', 1, true)\n"
  "      if at then\n"
  "        local line = pending:sub(1, at - 1)\n"
  "        pending = pending:sub(at + 1)\n"
  "        return line\n"
  "      end\n"
  "      local chunk = input:read(4096)\n"
  "      if not chunk or chunk == '' then\n"
  "        local line = pending ~= '' and pending or nil\n"
  "        pending = ''\n"
  "        return line\n"
  "      end\n"
  "      pending = pending .. chunk\n"
  "    end\n"
  "  end\n"
  "  while true do\n"
  "    if interactive then io.stdout:write('> '); io.stdout:flush() end\n"
  "    local line = read_line()\n"
  "    if not line then if interactive then io.stdout:write('\\n') end; return end\n"
  "    local f, err = loadstring('return ' .. line, '=stdin')\n"
  "    if not f then f, err = loadstring(line, '=stdin') end\n"
  "    if not f then io.stderr:write(err, '\\n') else show(xpcall(f, debug.traceback)) end\n"
  "  end\n"
  "end, { schedulers = schedulers })\n";

static void usage(FILE *out)
{
  fprintf(out, "usage: smarm [-s N] [script.lua [args...] | -e code [args...]]\n"
               "       smarm -n script.lua [args...]\n"
               "       smarm -v\n"
               "  -s N   schedulers (default: online CPUs)\n"
               "  -e c   run the code c as the main actor\n"
               "  -n     plain: start no runtime; the script calls smarm.run itself\n"
               "  -v     print the versions of smarm, LuaJIT and libuv\n"
               "With no script and no -e: a prompt whose lines run in the main actor.\n");
}

/* Sets the global `arg` like the lua interpreter: arg[0] = script, arg[1..] = the rest. */
static void set_arg(lua_State *L, char **argv, int argc, int script_at)
{
  lua_createtable(L, argc - script_at, script_at + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script_at);
  }
  lua_pushinteger(L, argc - script_at - 1);
  lua_setfield(L, -2, "n");
  lua_setglobal(L, "arg");
}

static int report(lua_State *L, int status)
{
  if (status != 0) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "smarm: %s\n", msg ? msg : "(error object is not a string)");
    fflush(stderr);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv)
{
  unsigned schedulers = 0;
  const char *code = NULL;
  int plain = 0;
  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
    if (strcmp(argv[i], "-v") == 0) {
      printf("smarm %s\n%s\nlibuv %s\n", SMARM_VERSION, LUAJIT_VERSION, uv_version_string());
      return 0;
    } else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > SMARM_SCHED_MAX) {
        fprintf(stderr, "smarm: -s wants a number of schedulers from 1 to %d\n", SMARM_SCHED_MAX);
        return 2;
      }
      schedulers = (unsigned)n;
    } else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc) {
      code = argv[++i];
      i++;
      break;
    } else if (strcmp(argv[i], "-n") == 0) {
      plain = 1;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else {
      usage(stderr);
      return 2;
    }
  }

  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "smarm: not enough memory\n");
    return 1;
  }
  luaL_openlibs(L);
  lsmarm_preload(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", SMARM_LUA_DIR, SMARM_LUA_DIR,
                  lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);

  int status;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "smarm");
  status = lua_pcall(L, 1, 1, 0);
  if (status != 0)
    return report(L, status);
  int smarm = lua_gettop(L);

  if (code || i < argc) {
    if (code) {
      set_arg(L, argv, argc, i - 1);
      status = luaL_loadbuffer(L, code, strlen(code), "=(command line)");
    } else {
      set_arg(L, argv, argc, i);
      status = luaL_loadfile(L, strcmp(argv[i], "-") == 0 ? NULL : argv[i]);
    }
    if (status != 0)
      return report(L, status);
    int chunk = lua_gettop(L);
    if (plain) {
      lua_getglobal(L, "debug");
      lua_getfield(L, -1, "traceback");
      lua_insert(L, chunk);
      lua_pop(L, 1);
      lua_getglobal(L, "arg");
      int n = (int)lua_objlen(L, -1);
      for (int k = 1; k <= n; k++)
        lua_rawgeti(L, -k, k);
      lua_remove(L, -n - 1);
      status = lua_pcall(L, n, 0, chunk);
      int rc = report(L, status);
      lua_close(L);
      return rc;
    }
    luaL_loadbuffer(L, runner, sizeof runner - 1, "=smarm");
    lua_pushvalue(L, smarm);
    lua_pushvalue(L, chunk);
    if (schedulers)
      lua_pushinteger(L, schedulers);
    else
      lua_pushnil(L);
    status = lua_pcall(L, 3, 0, 0);
  } else {
    set_arg(L, argv, argc, 0);
    luaL_loadbuffer(L, prompt, sizeof prompt - 1, "=smarm");
    lua_pushvalue(L, smarm);
    if (schedulers)
      lua_pushinteger(L, schedulers);
    else
      lua_pushnil(L);
    lua_pushboolean(L, isatty(0) && isatty(1));
    status = lua_pcall(L, 3, 0, 0);
  }
  int rc = report(L, status);
  lua_close(L);
  return rc;
}
