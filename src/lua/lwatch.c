/*
** smarm.fs.watch: a watch on a file or folder (src/io/watch.c, libuv's fs events) whose changes
** arrive in the watching actor's mailbox as messages:
**   { smarm = "fs_event", watch = w, path = <what is watched>, name = <the entry, or nil>,
**     rename = true | nil, change = true | nil }
**   { smarm = "fs_event_error", watch = w, path =, reason = <libuv's error name> }
** A watch is a userdata holding the IO side's id and the path; close() or its __gc stops it
** (a posted stop), and its run's end stops it (a watch of an earlier run is stale, lhandle.h). It
** cannot travel in messages; its events go to the actor that started it.
*/
#define _GNU_SOURCE
#include "lwatch.h"

#include "codec.h"
#include "io/watch.h"
#include "lhandle.h"
#include "lio.h"
#include "lpark.h"

#include <lauxlib.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_MT "smarm.fs.watch"

typedef struct lwatch {
  uint64_t id;  /* 0 once stopped */
  uint64_t events_id; /* the id its events carry, kept after the stop: those sent before it
                         still arrive as its own (watch = w) */
  uint32_t run; /* the run that made it (sm_lhandle_run_generation) */
  char *path;
} lwatch_t;

static int stale(const lwatch_t *w) { return w->run != sm_lhandle_run_generation(); }

static void post_stop(lwatch_t *w)
{
  if (w->id && !stale(w)) {
    watch_req_t *r = sm_watch_req_new(IOWATCH_STOP);
    if (r) { /* out of memory: it watches on until the run's end */
      r->id = w->id;
      sm_io_post(&r->base);
    }
  }
  w->id = 0;
}

/* watch(path) -> watch | nil, "<path>: <reason>", code */
static int l_watch(lua_State *L)
{
  luaL_checkstring(L, 1);
  lua_settop(L, 1);
  watch_req_t *r = sm_watch_req_new(IOWATCH_START);
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->path = sm_lio_copy_arg(L, 1, NULL);
  r->owner = smarm_self();
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, "fs.watch");
  if (err) {
    int n = sm_lio_push_failure(L, err, r->path);
    sm_lio_unbox(L, box);
    return n;
  }
  lwatch_t *w = lua_newuserdata(L, sizeof *w);
  memset(w, 0, sizeof *w);
  w->run = sm_lhandle_run_generation();
  w->path = strdup(r->path);
  if (!w->path)
    return luaL_error(L, "not enough memory"); /* the box stops the watch */
  w->id = w->events_id = r->new_id;
  luaL_getmetatable(L, WATCH_MT);
  lua_setmetatable(L, -2);
  r->new_taken = 1; /* the userdata stops it now */
  sm_codec_set_event_target(L, -1, IO_EV_WATCH, w->id);
  sm_lio_unbox(L, box);
  return 1;
}

static lwatch_t *check_watch(lua_State *L, const char *fname)
{
  lwatch_t *w = luaL_checkudata(L, 1, WATCH_MT);
  if (stale(w))
    luaL_error(L, "smarm.fs.%s: the watch belongs to an earlier run", fname);
  return w;
}

/* w:close() -> true; the events already sent may still arrive */
static int m_close(lua_State *L)
{
  lwatch_t *w = check_watch(L, "watch.close");
  post_stop(w);
  lua_pushboolean(L, 1);
  return 1;
}

static int m_gc(lua_State *L)
{
  lwatch_t *w = lua_touserdata(L, 1);
  post_stop(w);
  free(w->path);
  w->path = NULL;
  return 0;
}

static int m_tostring(lua_State *L)
{
  lwatch_t *w = luaL_checkudata(L, 1, WATCH_MT);
  lua_pushfstring(L, "smarm.fs.watch (%s, %s)", w->path ? w->path : "?",
                  stale(w) ? "of an earlier run" : w->id ? "watching" : "closed");
  return 1;
}

/* The events' decoder (codec.h). */
static void decode_event(lua_State *L, const unsigned char *p, size_t n)
{
  io_event_t ev;
  watch_payload_t pl;
  memcpy(&ev, p, sizeof ev);
  int data = ev.kind == IO_EV_DATA;
  if ((!data && ev.kind != IO_EV_ERROR) ||
      (data && (n < sizeof ev + sizeof pl ||
                (memcpy(&pl, p + sizeof ev, sizeof pl), n != sizeof ev + sizeof pl + pl.name_len))))
    luaL_error(L, "malformed message");
  luaL_checkstack(L, 4, "message");
  lua_createtable(L, 0, 6);
  lua_pushstring(L, data ? "fs_event" : "fs_event_error");
  lua_setfield(L, -2, "smarm");
  if (sm_codec_push_event_target(L, IO_EV_WATCH, ev.id)) {
    lwatch_t *w = luaL_testudata(L, -1, WATCH_MT);
    if (w && w->events_id == ev.id && !stale(w)) {
      lua_pushstring(L, w->path);
      lua_setfield(L, -3, "path");
      lua_setfield(L, -2, "watch");
    } else {
      lua_pop(L, 1);
    }
  }
  if (data) {
    if (pl.name_len) {
      lua_pushlstring(L, (const char *)p + sizeof ev + sizeof pl, pl.name_len);
      lua_setfield(L, -2, "name");
    }
    if (pl.what & WATCH_RENAME) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "rename");
    }
    if (pl.what & WATCH_CHANGE) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "change");
    }
  } else {
    lua_pushstring(L, sm_io_err_name(ev.err));
    lua_setfield(L, -2, "reason");
  }
  sm_codec_hold_event(L, IO_EV_WATCH);
}

static void event_taken(lua_State *L) { (void)L; } /* no flow control */

static const codec_event_fns_t event_fns = {decode_event, event_taken};

static const luaL_Reg methods[] = {{"close", m_close}, {NULL, NULL}};

void sm_lwatch_register(lua_State *L, int module)
{
  sm_lio_handle_metatable(L, WATCH_MT, methods, m_gc, m_tostring);
  lua_getfield(L, module, "fs");
  lua_pushcfunction(L, l_watch);
  lua_setfield(L, -2, "watch");
  lua_pop(L, 1);
  sm_codec_set_event_fns(IO_EV_WATCH, &event_fns);
}
