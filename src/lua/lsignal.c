/*
** smarm.signal: waiting for a signal in Lua actors. The IO thread holds one libuv signal handle
** per signal while at least one actor waits for it (src/io/proc.c), so the signal's default
** action applies again when nobody waits, unless smarm.signal.catch asked for it to stay caught
** for the run. Only the names below can be waited for or caught.
*/
#include "lsignal.h"

#include "io/proc.h"
#include "lio.h"
#include "lpark.h"

#include <lauxlib.h>

#include <signal.h>
#include <string.h>

static const struct {
  const char *name;
  int signum;
  int waitable; /* smarm.signal.wait takes it (the rest can only be sent) */
} signal_names[] = {
  {"SIGINT", SIGINT, 1},   {"SIGTERM", SIGTERM, 1}, {"SIGHUP", SIGHUP, 1},
  {"SIGUSR1", SIGUSR1, 1}, {"SIGUSR2", SIGUSR2, 1}, {"SIGQUIT", SIGQUIT, 1},
  {"SIGKILL", SIGKILL, 0}, {"SIGSTOP", SIGSTOP, 0}, {"SIGCONT", SIGCONT, 0},
  {"SIGALRM", SIGALRM, 0}, {"SIGPIPE", SIGPIPE, 0},
};

int sm_lsignal_number(const char *name, int any)
{
  for (size_t i = 0; i < sizeof signal_names / sizeof *signal_names; i++)
    if ((any || signal_names[i].waitable) && strcmp(name, signal_names[i].name) == 0)
      return signal_names[i].signum;
  return 0;
}

/* wait(name [, timeout]) -> name | nil, "timeout"; with `catching`, catch(name) -> true (name is
** caught for the rest of the run: src/io/proc.c, a caught signal). One request to the IO thread
** either way. */
static int signal_request(lua_State *L, int catching)
{
  const char *name = luaL_checkstring(L, 1);
  int signum = sm_lsignal_number(name, 0);
  if (!signum)
    return luaL_argerror(L, 1, "SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 or SIGQUIT expected");
  int64_t timeout_ns = catching ? SMARM_FOREVER : sm_lpark_opt_seconds(L, 2);
  lua_settop(L, 2);
  proc_req_t *r = sm_proc_signal_new();
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->signum = signum;
  if (catching)
    r->op = IOPROC_CATCH;
  int err = sm_lsmarm_io_call(L, &r->base, timeout_ns, catching ? "signal.catch" : "signal.wait");
  int n = 1;
  if (err)
    n = sm_lio_push_failure(L, err, NULL);
  else if (catching)
    lua_pushboolean(L, 1);
  else
    lua_pushstring(L, name);
  sm_lio_unbox(L, box);
  return n;
}

static int l_signal_wait(lua_State *L) { return signal_request(L, 0); }
static int l_signal_catch(lua_State *L) { return signal_request(L, 1); }

static const luaL_Reg functions[] = {{"wait", l_signal_wait}, {"catch", l_signal_catch},
                                     {NULL, NULL}};

void sm_lsignal_register(lua_State *L, int module)
{
  sm_lio_add_table(L, module, "signal", functions);
}
