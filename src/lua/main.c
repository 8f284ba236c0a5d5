/*
** The smarm executable: LuaJIT with smarm built in, running a script (or code, or a prompt) as
** the main actor of a runtime.
**
**   smarm [-s N] script.lua [args...]   run the script; `arg` as the lua interpreter sets it
**   (-N NODE [-C COOKIE]: the runtime is that Erlang node first)
**   smarm [-s N] -e 'code' [args...]    run code
**   smarm [-s N]                        a prompt whose lines run in the main actor
**   smarm -n script.lua [args...]       plain mode: no runtime is started, the script calls
**                                       smarm.run itself (benchmarks use this to run several
**                                       configurations, each with its own scheduler count)
**   smarm -a PATH, smarm attach PATH    a prompt of the console listening at PATH
**                                       (smarm.console.listen, lua/smarm/console.lua)
**   smarm top PATH                      smarm.top() of that console's system
**   smarm -v                            versions
**   smarm test [busted options...]      busted on this executable (plain mode), with Debian's or
**                                       /usr/local's busted modules found (lua/smarm/cli.lua)
**
** Exit status: 0, or 1 with the error and its traceback on stderr (nothing for error() without a
** value, as lua.c), 2 for bad usage: ours, or a script's that raises { usage = "text" } (its text
** alone is printed: the bench scripts' unknown variant).
**
** This file parses the command line and loads the script; how a script or the prompt then runs
** is Lua, in lua/smarm/cli.lua, found through package.path, which starts with the folder of smarm's
** modules (lua_dir): the executable works from any directory, installed or in its build tree.
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

/* Pushes the folder of smarm's Lua modules: next to an installed executable (<prefix>/bin/smarm
** finds <prefix>/share/lua/5.1/smarm/, cmake/install.cmake), else the source tree's lua/ folder
** (SMARM_LUA_DIR, an absolute path: the executable of a build tree). */
static void push_lua_dir(lua_State *L)
{
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
  if (slash) {
    *slash = '\0';
    lua_pushfstring(L, "%s/../share/lua/5.1", exe);
    lua_pushfstring(L, "%s/smarm/cli.lua", lua_tostring(L, -1));
    int installed = access(lua_tostring(L, -1), R_OK) == 0;
    lua_pop(L, 1);
    if (installed)
      return;
    lua_pop(L, 1);
  }
  lua_pushstring(L, SMARM_LUA_DIR);
}

/* Pushes the function `name` of lua/smarm/cli.lua (the runner of scripts and the prompt, found
** on package.path, which names smarm's own folder first). Returns 0, or an error status with the
** message pushed. */
static int push_cli_function(lua_State *L, const char *name)
{
  lua_getglobal(L, "require");
  lua_pushliteral(L, "smarm.cli");
  int status = lua_pcall(L, 1, 1, 0);
  if (status != 0)
    return status;
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  return 0;
}

static void usage(FILE *out)
{
  fprintf(out, "usage: smarm [-s N] [-S SIZE] [-N NODE [-C COOKIE]] [script.lua [args...] | -e code "
               "[args...]]\n"
               "       smarm -n script.lua [args...]\n"
               "       smarm -a PATH | smarm attach PATH | smarm top PATH\n"
               "       smarm -v\n"
               "       smarm test [busted options...]\n"
               "  -s N     schedulers (default: online CPUs)\n"
               "  -S SIZE  C stack per actor: bytes, or with K, M or G (default 256K)\n"
               "  -N NODE  make the runtime the Erlang node NODE (alive@host) before anything runs\n"
               "  -C C     its cookie (default: ~/.erlang.cookie's)\n"
               "  -e c     run the code c as the main actor\n"
               "  -n       plain: start no runtime; the script calls smarm.run itself\n"
               "  -a PATH  attach to the console listening at PATH (smarm.console.listen)\n"
               "  -v       print the versions of smarm, LuaJIT and libuv\n"
               "With no script and no -e: a prompt whose lines run in the main actor.\n"
               "smarm test (first argument) runs busted (its specs call smarm.run themselves);\n"
               "a script named test runs as ./test or after --.\n");
}

/* The message handler of a script run with -n: debug.traceback's, except for the error of a
** smarm.run that the script did not catch (its main actor's), whose own frames smarm.run kept
** aside (smarm.last_traceback: the text, then the actor's traceback); they come first, then the
** script's. Told by the function that raised it (smarm.run's own, smarm._raw_run) and by the text,
** which that traceback starts with. */
static const char PLAIN_HANDLER[] =
    "local e = ...\n"
    "local tb = debug.traceback(e, 2)\n"
    "local text = (type(e) == 'string' or type(e) == 'number') and tostring(e)\n"
    "local smarm = package.loaded.smarm\n"
    "local from = debug.getinfo(2, 'f')\n" /* the function that raised it */
    "local kept = text and type(smarm) == 'table' and from and from.func == smarm._raw_run\n"
    "  and smarm.last_traceback()\n"
    "if type(kept) == 'string' and kept:sub(1, #text + 1) == text .. '\\n' then\n"
    "  return kept .. '\\n' .. tb:sub(#text + 2)\n" /* tb is text, a newline, its frames */
    "end\n"
    "return tb\n";

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

/* Prints an error and returns the exit status. An error without a value (error()) prints nothing,
** as lua.c: busted on Lua 5.1 ends a run with failures that way. A usage error ({ usage = text })
** prints its text without a traceback (a traceback handler leaves a table as it is). */
static int report(lua_State *L, int status)
{
  if (status != 0 && lua_isnil(L, -1))
    return 1;
  if (status != 0 && lua_istable(L, -1)) {
    lua_getfield(L, -1, "usage");
    if (lua_type(L, -1) == LUA_TSTRING) {
      fprintf(stderr, "smarm: %s\n", lua_tostring(L, -1));
      fflush(stderr);
      return 2;
    }
    lua_pop(L, 1);
  }
  if (status != 0) {
    int err = lua_gettop(L);
    const char *msg = lua_tostring(L, err);
    if (!msg && luaL_getmetafield(L, err, "__tostring")) { /* protected: it may raise */
      lua_pushvalue(L, err);
      if (lua_pcall(L, 1, 1, 0) == 0 && lua_type(L, -1) == LUA_TSTRING)
        msg = lua_tostring(L, -1);
      else
        msg = lua_pushfstring(L, "(error object is a %s value: its __tostring failed: %s)",
                              luaL_typename(L, err),
                              lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                             : "it did not give a string");
    }
    fprintf(stderr, "smarm: %s\n", msg ? msg : lua_pushfstring(L, "(error object is a %s value)",
                                                                   luaL_typename(L, err)));
    fflush(stderr);
    return 1;
  }
  return 0;
}

/* Pushes smarm.run's options from the command line (-s, -S): those given, the rest defaults;
** and -N, -C as node and cookie (cli.lua starts the node with them). */
static const char *node_name, *node_cookie;
static void push_run_opts(lua_State *L, unsigned schedulers, size_t stack_size)
{
  lua_createtable(L, 0, 4);
  if (node_name) {
    lua_pushstring(L, node_name);
    lua_setfield(L, -2, "node");
  }
  if (node_cookie) {
    lua_pushstring(L, node_cookie);
    lua_setfield(L, -2, "cookie");
  }
  if (schedulers) {
    lua_pushinteger(L, schedulers);
    lua_setfield(L, -2, "schedulers");
  }
  if (stack_size) {
    lua_pushnumber(L, (lua_Number)stack_size);
    lua_setfield(L, -2, "stack_size");
  }
}

int main(int argc, char **argv)
{
  unsigned schedulers = 0;
  size_t stack_size = 0;
  const char *code = NULL;
  const char *attach = NULL;
  int top = 0;
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
    } else if (strcmp(argv[i], "-S") == 0 && i + 1 < argc) {
      char *end;
      double n = strtod(argv[++i], &end);
      double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                  : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
      if (unit != 1.0)
        end++;
      n *= unit;
      if (*end || !(n >= 131072 && n <= 1073741824.0)) { /* lsmarm.c: opts.stack_size */
        fprintf(stderr, "smarm: -S wants a stack size from 128K to 1G (bytes, or with K, M or G)\n");
        return 2;
      }
      stack_size = (size_t)n;
    } else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc) {
      code = argv[++i];
      i++;
      break;
    } else if (strcmp(argv[i], "-N") == 0 && i + 1 < argc) {
      node_name = argv[++i];
    } else if (strcmp(argv[i], "-C") == 0 && i + 1 < argc) {
      node_cookie = argv[++i];
    } else if (strcmp(argv[i], "-a") == 0 && i + 1 < argc) {
      attach = argv[++i];
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

  /* the subcommand only as the first argument: `smarm -- test` and `smarm -s 4 test` run a
  ** script named test */
  int test = i == 1 && argc > 1 && strcmp(argv[1], "test") == 0;
  if (attach && (i < argc || code || plain)) { /* -a PATH takes no script, -e or -n */
    usage(stderr);
    return 2;
  }
  if (plain && !code && i >= argc) { /* the prompt would start a runtime after all */
    fprintf(stderr, "smarm: -n runs a script (or -e code) that calls smarm.run itself: none was "
                    "given\n");
    return 2;
  }
  if (plain && (schedulers || stack_size)) { /* they would be silently ignored */
    fprintf(stderr, "smarm: -s and -S configure the runtime that -n does not start: pass them to "
                    "smarm.run as opts.schedulers and opts.stack_size\n");
    return 2;
  }
  if (node_cookie && !node_name) {
    fprintf(stderr, "smarm: -C is the cookie of the node that -N starts\n");
    return 2;
  }
  if ((plain || attach) && node_name) {
    fprintf(stderr, "smarm: -N makes the runtime that runs the script a node: not with -n or -a "
                    "(a script calls smarm.node.start itself)\n");
    return 2;
  }
  if (i == 1 && argc > 1 && (strcmp(argv[1], "attach") == 0 || strcmp(argv[1], "top") == 0)) {
    if (argc != 3) {
      usage(stderr);
      return 2;
    }
    top = argv[1][0] == 't';
    attach = argv[2];
  }

  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "smarm: not enough memory\n");
    return 1;
  }
  luaL_openlibs(L);
  sm_lsmarm_preload(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  push_lua_dir(L);
  const char *dir = lua_tostring(L, -1);
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -2));
  lua_setfield(L, -4, "path");
  lua_pop(L, 3);

  int status;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "smarm");
  status = lua_pcall(L, 1, 1, 0);
  if (status != 0)
    return report(L, status);
  int smarm = lua_gettop(L);

  if (attach) {
    set_arg(L, argv, argc, 0);
    status = push_cli_function(L, top ? "top" : "attach");
    if (status != 0)
      return report(L, status);
    lua_pushvalue(L, smarm);
    lua_pushstring(L, attach);
    lua_pushboolean(L, isatty(0) && isatty(1));
    status = lua_pcall(L, 3, 0, 0);
  } else if (test) {
    set_arg(L, argv, argc, i); /* arg[0] = "test", then busted's options */
    status = push_cli_function(L, "test");
    if (status == 0)
      status = lua_pcall(L, 0, 0, 0);
  } else if (code || i < argc) {
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
      if (luaL_loadstring(L, PLAIN_HANDLER) != 0)
        return report(L, 1);
      lua_insert(L, chunk);
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
    status = push_cli_function(L, "run");
    if (status != 0)
      return report(L, status);
    lua_pushvalue(L, smarm);
    lua_pushvalue(L, chunk);
    push_run_opts(L, schedulers, stack_size);
    status = lua_pcall(L, 3, 0, 0);
  } else {
    set_arg(L, argv, argc, 0);
    status = push_cli_function(L, "prompt");
    if (status != 0)
      return report(L, status);
    lua_pushvalue(L, smarm);
    push_run_opts(L, schedulers, stack_size);
    lua_pushboolean(L, isatty(0) && isatty(1));
    status = lua_pcall(L, 3, 0, 0);
  }
  int rc = report(L, status);
  lua_close(L);
  return rc;
}
