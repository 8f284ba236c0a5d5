/*
** Paths of values in error messages (see lpath.h).
*/
#include "lpath.h"

#include <lauxlib.h>

#include <stdio.h>
#include <string.h>

static void path_append(lpath_t *p, const char *s)
{
  size_t n = strlen(s);
  if (p->len + n >= sizeof p->s - 4) {
    if (p->len < sizeof p->s - 4)
      memcpy(p->s + p->len, "...", 4);
    p->len = sizeof p->s - 1;
    return;
  }
  memcpy(p->s + p->len, s, n + 1);
  p->len += n;
}

static int is_identifier(const char *s, size_t n)
{
  if (n == 0 || n > 60 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
    return 0;
  for (size_t i = 1; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
          (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
      return 0;
  return 1;
}

void sm_lpath_key(lpath_t *p, lua_State *L, int idx, int is_upvalue)
{
  char part[80];
  if (is_upvalue) {
    snprintf(part, sizeof part, "[upvalue '%.60s']", lua_tostring(L, idx));
    path_append(p, part);
    return;
  }
  switch (lua_type(L, idx)) {
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (is_identifier(s, n)) {
      snprintf(part, sizeof part, ".%s", s);
    } else { /* quoted as Lua would read it back: \" \\ and control bytes escaped */
      size_t o = 0, i = 0;
      part[o++] = '[';
      part[o++] = '"';
      for (; i < n && o < 48; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
          o += (size_t)snprintf(part + o, sizeof part - o, "\\%c", c);
        else if (c < 32 || c == 127)
          o += (size_t)snprintf(part + o, sizeof part - o, "\\%u", c);
        else
          part[o++] = (char)c;
      }
      snprintf(part + o, sizeof part - o, "%s\"]", i < n ? "..." : "");
    }
    break;
  }
  case LUA_TNUMBER: /* %.17g: every double reads back as itself (2^53 + 2 is not 2^53) */
    snprintf(part, sizeof part, "[%.17g]", lua_tonumber(L, idx));
    break;
  case LUA_TBOOLEAN:
    snprintf(part, sizeof part, "[%s]", lua_toboolean(L, idx) ? "true" : "false");
    break;
  default:
    snprintf(part, sizeof part, "[%s]", luaL_typename(L, idx));
  }
  path_append(p, part);
}
