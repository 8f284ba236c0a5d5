/*
** What the Lua benchmark harness (lua/smarm/bench.lua) needs from C: a clock read that gives
** both lenses at once and never parks, and histograms with constant cost per sample.
**
**   smarm.clock() -> ns, cycles        CLOCK_MONOTONIC in ns and the serialised cycle counter
**   smarm.cycles() -> cycles           the cycle counter alone (src/util/timing.h reads both)
**   smarm.histogram() -> h             h:record(v), h:quantile(q), h:count(), h:max(), h:mean(),
**                                      h:reset(), h:merge(other), h:export() -> string,
**                                      h:import(string) (merges an export: histograms travel
**                                      between VMs as strings inside messages)
** Values are non-negative integers in a unit the caller picks (the harness: picoseconds and
** centi-cycles); fractions are truncated.
*/
#define _GNU_SOURCE
#include "lbench.h"

#include "util/histogram.h"
#include "util/timing.h"

#include <lauxlib.h>

#include <stdint.h>
#include <string.h>

#define HIST_MT "smarm.histogram"

static int l_clock(lua_State *L)
{
  uint64_t c = cycles_begin(); /* serialised: earlier work is done before the read */
  lua_pushnumber(L, (lua_Number)wall_ns());
  lua_pushnumber(L, (lua_Number)c);
  return 2;
}

/* Exact while below 2^53 (about 40 days of uptime at 2.6 GHz). */
static int l_cycles(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)cycles_begin());
  return 1;
}

static histogram_t *check_hist(lua_State *L, int idx)
{
  return luaL_checkudata(L, idx, HIST_MT);
}

static int l_histogram(lua_State *L)
{
  histogram_t *h = lua_newuserdata(L, sizeof *h);
  sm_hist_reset(h);
  luaL_getmetatable(L, HIST_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static int h_record(lua_State *L)
{
  histogram_t *h = check_hist(L, 1);
  lua_Number v = luaL_checknumber(L, 2);
  luaL_argcheck(L, v == v, 2, "a number expected, got NaN");
  /* (uint64_t) of 2^64 or more is undefined in C (it recorded 0 here): the largest is kept */
  sm_hist_record(h, v <= 0 ? 0 : v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v);
  return 0;
}

static int h_quantile(lua_State *L)
{
  histogram_t *h = check_hist(L, 1);
  lua_Number q = luaL_checknumber(L, 2);
  luaL_argcheck(L, q >= 0 && q <= 1, 2, "quantile from 0 to 1 expected");
  lua_pushnumber(L, (lua_Number)sm_hist_quantile(h, q));
  return 1;
}

static int h_count(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)check_hist(L, 1)->count);
  return 1;
}

static int h_max(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)check_hist(L, 1)->max);
  return 1;
}

static int h_mean(lua_State *L)
{
  lua_pushnumber(L, sm_hist_mean(check_hist(L, 1)));
  return 1;
}

static int h_reset(lua_State *L)
{
  sm_hist_reset(check_hist(L, 1));
  return 0;
}

static int h_merge(lua_State *L)
{
  sm_hist_merge(check_hist(L, 1), check_hist(L, 2));
  return 0;
}

/* Export: count, max, then (bucket index, count) pairs of the non-empty buckets, as uint64s. */
static int h_export(lua_State *L)
{
  histogram_t *h = check_hist(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  uint64_t head[2] = {h->count, h->max};
  luaL_addlstring(&b, (const char *)head, sizeof head);
  for (uint64_t i = 0; i < HIST_BUCKETS; i++) {
    if (h->counts[i]) {
      uint64_t pair[2] = {i, h->counts[i]};
      luaL_addlstring(&b, (const char *)pair, sizeof pair);
    }
  }
  luaL_pushresult(&b);
  return 1;
}

static int h_import(lua_State *L)
{
  histogram_t *h = check_hist(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  luaL_argcheck(L, n >= 16 && n % 16 == 0, 2, "not a histogram export");
  uint64_t head[2];
  memcpy(head, s, sizeof head);
  histogram_t add;
  sm_hist_reset(&add);
  add.count = head[0];
  add.max = head[1];
  for (size_t off = 16; off < n; off += 16) {
    uint64_t pair[2];
    memcpy(pair, s + off, sizeof pair);
    luaL_argcheck(L, pair[0] < HIST_BUCKETS, 2, "not a histogram export");
    add.counts[pair[0]] += pair[1];
  }
  sm_hist_merge(h, &add);
  return 0;
}

static const luaL_Reg hist_methods[] = {
  {"record", h_record}, {"quantile", h_quantile}, {"count", h_count},
  {"max", h_max},       {"mean", h_mean},         {"reset", h_reset},
  {"merge", h_merge},   {"export", h_export},     {"import", h_import},
  {NULL, NULL},
};

void sm_lbench_register(lua_State *L, int module)
{
  if (luaL_newmetatable(L, HIST_MT)) {
    lua_newtable(L);
    luaL_register(L, NULL, hist_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_clock);
  lua_setfield(L, module, "clock");
  lua_pushcfunction(L, l_cycles);
  lua_setfield(L, module, "cycles");
  lua_pushcfunction(L, l_histogram);
  lua_setfield(L, module, "histogram");
}
