/*
** smarm.fs: the file system for Lua actors, done on libuv's pool (src/io/fs.c) so that a slow
** disk parks only the calling actor. Every call copies its arguments into its request and
** returns its results, or nil, message, code where the code is libuv's error name ("ENOENT").
** Misuse (wrong argument types, outside an actor, a closed file) raises.
**
** Files (smarm.fs.open) are userdata that own their descriptor: it is closed by file:close(),
** by __gc (a posted close: no switch inside __gc), when the file is handed to another actor in a
** message (the receiver's handle owns it then), or at the end of the run that opened it
** (sm_lfs_end_run); a file of an earlier run is stale and touches no descriptor (lhandle.h).
*/
#define _GNU_SOURCE
#include "lfs.h"

#include "io/fs.h"
#include "lbinary.h"
#include "lhandle.h"
#include "lio.h"
#include "lpark.h"
#include "lvm.h"

#include <lauxlib.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A request for op, boxed at the top of the stack (sm_lio_box). */
static fs_req_t *new_bare_request(lua_State *L, enum fs_op op)
{
  fs_req_t *r = sm_fs_req_new(op);
  sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  return r;
}

/* The same with path (argument 1) copied. */
static fs_req_t *new_request(lua_State *L, enum fs_op op)
{
  luaL_checkstring(L, 1);
  fs_req_t *r = new_bare_request(L, op);
  r->path = sm_lio_copy_arg(L, 1, NULL);
  return r;
}

/* Runs r on the IO thread. Returns 0, or pushes nil, "<subject>: <reason>", code and returns 3. */
static int run(lua_State *L, fs_req_t *r, const char *fname, const char *subject)
{
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, fname);
  return err ? sm_lio_push_failure(L, err, subject) : 0;
}

static int l_readfile(lua_State *L)
{
  fs_req_t *r = new_request(L, FS_READFILE);
  int box = lua_gettop(L);
  int n = run(L, r, "fs.readfile", r->path);
  if (!n) {
    lua_pushlstring(L, r->data, r->len);
    n = 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

static int l_writefile(lua_State *L)
{
  size_t len;
  sm_lbinary_checkbytes(L, 2, &len); /* a string or a binary: raises before the request exists */
  lua_settop(L, 2);
  fs_req_t *r = new_request(L, FS_WRITEFILE);
  int box = lua_gettop(L);
  r->data = sm_lio_copy_bytes(L, 2, &r->len);
  r->mode = 0666;
  int n = run(L, r, "fs.writefile", r->path);
  if (!n) {
    lua_pushboolean(L, 1);
    n = 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

static int l_stat(lua_State *L)
{
  fs_req_t *r = new_request(L, FS_STAT);
  int box = lua_gettop(L);
  int n = run(L, r, "fs.stat", r->path);
  if (n) {
    sm_lio_unbox(L, box);
    return n;
  }
  lua_createtable(L, 0, 5);
  lua_pushnumber(L, (lua_Number)r->st.st_size);
  lua_setfield(L, -2, "size");
  lua_pushstring(L, sm_fs_type_name(r->st.st_mode));
  lua_setfield(L, -2, "type");
  lua_pushnumber(L, (lua_Number)(r->st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  lua_pushnumber(L, (lua_Number)r->st.st_mtim.tv_sec + r->st.st_mtim.tv_nsec / 1e9);
  lua_setfield(L, -2, "mtime");
  sm_lio_unbox(L, box);
  return 1;
}

/* unlink, rmdir, rename, mkdir: true or nil, message, code. */
static int simple(lua_State *L, enum fs_op op, const char *fname)
{
  int mode = 0;
  if (op == FS_MKDIR) {
    lua_Number m = luaL_optnumber(L, 2, 0777);
    luaL_argcheck(L, m >= 0 && m <= 07777 && m == (int)m, 2, "mode from 0 to 4095 expected");
    mode = (int)m;
  }
  if (op == FS_RENAME)
    luaL_checkstring(L, 2);
  lua_settop(L, op == FS_RENAME ? 2 : 1); /* the request's box goes above the arguments */
  fs_req_t *r = new_request(L, op);
  int box = lua_gettop(L);
  r->mode = mode;
  const char *subject = r->path;
  if (op == FS_RENAME) { /* either path may be what failed (a missing folder of the second) */
    r->path2 = sm_lio_copy_arg(L, 2, NULL);
    subject = lua_pushfstring(L, "%s -> %s", r->path, r->path2); /* above the box */
  }
  int n = run(L, r, fname, subject);
  if (!n) {
    lua_pushboolean(L, 1);
    n = 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

static int l_unlink(lua_State *L) { return simple(L, FS_UNLINK, "fs.unlink"); }
static int l_rmdir(lua_State *L) { return simple(L, FS_RMDIR, "fs.rmdir"); }
static int l_rename(lua_State *L) { return simple(L, FS_RENAME, "fs.rename"); }
static int l_mkdir(lua_State *L) { return simple(L, FS_MKDIR, "fs.mkdir"); }


static int l_scandir(lua_State *L)
{
  fs_req_t *r = new_request(L, FS_SCANDIR);
  int box = lua_gettop(L);
  int n = run(L, r, "fs.scandir", r->path);
  if (n) {
    sm_lio_unbox(L, box);
    return n;
  }
  lua_createtable(L, (int)r->count, 0);
  for (size_t i = 0; i < r->count; i++) {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, r->entries[i].name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, sm_fs_type_name(r->entries[i].type)); /* 0: "unknown" */
    lua_setfield(L, -2, "type");
    lua_rawseti(L, -2, (int)i + 1);
  }
  sm_lio_unbox(L, box);
  return 1;
}

/* ---- Files: smarm.fs.open and its handles ------------------------------------------------ */

#define FILE_MT "smarm.fs.file"

typedef struct lfile {
  int fd;      /* -1 once closed or handed over; reads and writes in flight use their own
                  duplicates (sm_fs_req_own_fd), so it may be closed under them */
  int handed;  /* sent in a message: another actor has it */
  uint32_t run; /* the run that made it (sm_lhandle_run_generation): its end closed the file */
  char *path;
  /* Read ahead at the file's position (reads by pattern or count, lines): rbuf[rstart, rlen)
  ** (malloc'd), so the descriptor's position is rlen - rstart bytes past the file's as the
  ** user sees it; a write, a seek or a hand-over first moves it back (unbuffer). */
  char *rbuf;
  size_t rstart, rlen, rcap;
  smarm_pid_t reader; /* the actor parked in a read at the file's position, or 0 */
  double timeout; /* seconds a read at the position waits for data; negative: no limit */
  int unpollable; /* a regular file: its reads never wait, there is nothing to wait for */
} lfile_t;

/* Registry key of the VM's open files (weak keys: file userdata -> true), for sm_lfs_end_run. */
static const char open_files_key = 0;

/* A file of a run that has ended: that run's end closed its descriptor, whose number may be
** another file's now. */
static int file_stale(const lfile_t *f) { return f->run != sm_lhandle_run_generation(); }

/* Makes the new file userdata on top a file of this run that owns fd: first records it as open
** in its VM and with its owner, the running actor (either may raise for memory while the
** userdata has no __gc and owns nothing: a decoder's block still closes the descriptor then),
** then gives it fd and its metatable. */
static const lhandle_kind_t file_kind;

static void file_made(lua_State *L, lfile_t *f, int fd, char *path)
{
  memset(f, 0, sizeof *f);
  f->fd = -1; /* owns nothing until the steps that may raise are done */
  f->timeout = -1;
  f->run = sm_lhandle_run_generation();
  lvm_push_registry_table(L, &open_files_key, "k");
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  sm_lhandle_own(L, -1, &file_kind);
  f->fd = fd;
  f->path = path;
  luaL_getmetatable(L, FILE_MT);
  lua_setmetatable(L, -2);
}

static lfile_t *check_file(lua_State *L, const char *fname)
{
  lfile_t *f = luaL_checkudata(L, 1, FILE_MT);
  if (file_stale(f))
    luaL_error(L, "smarm.fs.%s: the file belongs to an earlier run", fname);
  if (f->handed)
    luaL_error(L, "smarm.fs.%s: the file was handed to another actor", fname);
  if (f->fd < 0)
    luaL_error(L, "smarm.fs.%s: the file is closed", fname);
  return f;
}

static int flags_of(lua_State *L, const char *how)
{
  static const struct {
    const char *how;
    int flags;
  } table[] = {
    {"r", O_RDONLY}, {"r+", O_RDWR}, {"w", O_WRONLY | O_CREAT | O_TRUNC},
    {"w+", O_RDWR | O_CREAT | O_TRUNC}, {"a", O_WRONLY | O_CREAT | O_APPEND},
    {"a+", O_RDWR | O_CREAT | O_APPEND},
  };
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (strcmp(how, table[i].how) == 0)
      return table[i].flags;
  luaL_argerror(L, 2, "\"r\", \"r+\", \"w\", \"w+\", \"a\" or \"a+\" expected");
  return 0;
}

/* open(path, flags [, mode]) -> file */
static int l_open(lua_State *L)
{
  luaL_checkstring(L, 1);
  int flags = flags_of(L, luaL_checkstring(L, 2));
  lua_Number mode = luaL_optnumber(L, 3, 0666);
  luaL_argcheck(L, mode >= 0 && mode <= 07777 && mode == (int)mode, 3,
                "mode from 0 to 4095 expected");
  lua_settop(L, 3);
  fs_req_t *r = new_request(L, FS_OPEN);
  int box = lua_gettop(L);
  r->flags = flags;
  r->mode = (int)mode;
  int n = run(L, r, "fs.open", r->path);
  if (!n) {
    lfile_t *f = lua_newuserdata(L, sizeof *f);
    file_made(L, f, r->fd, r->path); /* the path is kept for messages */
    r->path = NULL;
    r->fd = -1; /* taken: the request's end does not close it (fs_free) */
    n = 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

/* ---- Reading ---------------------------------------------------------------------------- */

static void post_file_close(lfile_t *f);

#define READ_CHUNK (64 * 1024) /* what one trip to the pool reads ahead */

/* A read at the file's position by another live actor is parked now: a second one would add
** its bytes to the read-ahead out of order. (An actor killed while parked leaves `reader`
** set; it is dead, so it does not count.) */
static int other_reader(const lfile_t *f)
{
  return f->reader && f->reader != smarm_self() && smarm_alive(f->reader) == 1;
}

static void check_no_reader(lua_State *L, lfile_t *f, const char *fname)
{
  if (other_reader(f)) /* named as check_file names its errors: smarm.fs.read, smarm.fs.lines */
    luaL_error(L, "smarm.fs.%s: another actor is reading this file",
               strncmp(fname, "file.", 5) == 0 ? fname + 5 : fname);
}

/* Moves the descriptor's position back over what was read ahead and drops it, so the position
** is the file's again (before a write, a seek or a hand-over). A descriptor that cannot seek (a
** FIFO, a terminal) keeps its read-ahead: reading and writing it are separate streams. */
static void unbuffer(lfile_t *f)
{
  size_t ahead = f->rlen - f->rstart;
  if (ahead && lseek(f->fd, -(off_t)ahead, SEEK_CUR) < 0)
    return;
  f->rstart = f->rlen = 0;
}

/* A read or write at the file's position that may take several trips to the pool holds a
** duplicate of the descriptor of its own from its first trip on, and makes every trip on it: a
** close by another actor meanwhile (or a hand-over of the file) does not cut it short, nor lose
** what it has read; it finishes on the duplicate, as one trip does (docs/api.md, file:close).
** The duplicate is a never-run request's, boxed on the stack: closed by release_fd, by the
** box's __gc when the call raises, and at once when the actor ends while parked in a trip (the
** trip's cleanup, `lost`: a killed writer of a FIFO must not keep its reader from the end). */
typedef struct fd_hold {
  int box;     /* the box's stack index; 0 until held */
  fs_req_t *req;
  smarm_cleanup_t lost; /* pushed for each trip's park (sm_lsmarm_io_call_with) */
} fd_hold_t;

/* The actor ended while parked in a trip: the duplicate closes now; its box owns nothing. */
static void hold_lost(void *arg)
{
  fs_req_t *r = arg;
  if (r->fd_owned && r->fd >= 0)
    close(r->fd);
  r->fd = -1;
  r->fd_owned = 0;
}

/* The descriptor a trip of the call holding h uses: its duplicate, made on the first call (f's
** state is checked then: it may have been closed before). A negative errno when it cannot be
** made (EMFILE): the call fails as a trip would. */
static int held_fd(lua_State *L, lfile_t *f, fd_hold_t *h, const char *fname)
{
  if (h->box)
    return h->req->fd;
  if (f->fd < 0)
    check_file(L, fname);
  fs_req_t *r = new_bare_request(L, FS_CLOSE);
  int err = sm_fs_req_own_fd(r, f->fd);
  if (err)
    return err; /* the box owns nothing and goes with the stack */
  h->box = lua_gettop(L);
  h->req = r;
  h->lost.fn = hold_lost;
  h->lost.arg = r;
  return r->fd;
}

static void release_fd(lua_State *L, fd_hold_t *h)
{
  if (h->box)
    sm_lio_unbox(L, h->box);
}

/* The cleanup for a trip of the call holding h (none before it holds a duplicate). */
static smarm_cleanup_t *trip_cleanup(fd_hold_t *h) { return h && h->box ? &h->lost : NULL; }

/* Waits on the IO thread until fd (f's, or its duplicate) can be read (for_what FS_WAIT_READ)
** or written (FS_WAIT_WRITE), or the deadline (smarm_now_ns) passes: 0, -ETIMEDOUT (nothing was
** done to the file) or another error. A regular file has nothing to wait for: 0 at once, and
** never asked again. */
static int wait_ready(lua_State *L, lfile_t *f, int fd, fd_hold_t *h, int64_t deadline,
                      int for_what, const char *fname)
{
  if (f->unpollable)
    return 0;
  sm_lpark_actor(L, fname); /* outside an actor: raises, as the read or write would */
  /* Ready now (data, room, a hang-up): no trip to the IO thread, whose answer could come after
  ** a limit of 0 (or the little left of one) has passed although the file was ready all along:
  ** a limit of 0 reads what is there and writes what fits. */
  struct pollfd pfd = {.fd = fd, .events = for_what == FS_WAIT_WRITE ? POLLOUT : POLLIN};
  if (poll(&pfd, 1, 0) > 0) {
    struct stat st; /* a regular file is always ready: never asked again */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
      f->unpollable = 1;
    return 0;
  }
  int64_t now = smarm_now_ns();
  if (now >= deadline)
    return -ETIMEDOUT; /* not ready, and no time left to wait */
  int top = lua_gettop(L);
  fs_req_t *r = sm_fs_wait_new(for_what);
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  sm_lpark_actor(L, fname); /* raise here, before there is a duplicate to close */
  sm_lpark_check(L, fname);
  int err = sm_fs_req_own_fd(r, fd);
  if (!err) {
    int reads = for_what == FS_WAIT_READ;
    if (reads)
      f->reader = smarm_self();
    err = sm_lsmarm_io_call_with(L, &r->base, deadline - now, fname, trip_cleanup(h));
    if (reads)
      f->reader = 0;
  }
  sm_lio_unbox(L, box);
  lua_settop(L, top);
  if (err == -EPERM) { /* epoll's answer for a regular file */
    f->unpollable = 1;
    err = 0;
  }
  return err;
}

/* The deadline of a call on f (smarm_now_ns), or -1 for none (file:settimeout). */
static int64_t deadline_of(const lfile_t *f)
{
  int64_t ns = sm_lsmarm_timeout_ns(f->timeout);
  return ns == SMARM_FOREVER ? -1 : smarm_now_ns() + ns;
}

/* One read at the position of fd (f's duplicate: held_fd) of up to `most` bytes onto the
** read-ahead, waiting for data until deadline (negative: no limit). Returns the bytes read (0:
** the end of the file), or -k after pushing the k values of a failure (nil, "timeout" when the
** deadline passed). */
static long fill(lua_State *L, lfile_t *f, fd_hold_t *h, size_t most, int64_t deadline,
                 const char *fname)
{
  int fd = h->req->fd;
  if (deadline >= 0) {
    int err = wait_ready(L, f, fd, h, deadline, FS_WAIT_READ, fname);
    if (err)
      return -sm_lio_push_failure(L, err, err == -ETIMEDOUT ? NULL : f->path);
  }
  int top = lua_gettop(L);
  fs_req_t *r = new_bare_request(L, FS_READ);
  int box = lua_gettop(L);
  r->len = most;
  r->data = malloc(most);
  if (!r->data)
    return luaL_error(L, "not enough memory");
  sm_lpark_actor(L, fname); /* raise here, before there is a duplicate to close */
  sm_lpark_check(L, fname);
  /* A file that can seek is read with pread at the descriptor's position, which moves past the
  ** bytes only once this actor has them (below). A read(2) moved it in the pool: an actor killed
  ** while parked here dropped the bytes the position had already passed, and an actor sharing
  ** the file (spawn's upvalues) read on 64 KiB further, or spliced them onto the killed one's
  ** read-ahead. Now it reads on where the killed one had got to. A FIFO or terminal (ESPIPE)
  ** has no position to keep: what the read takes is lost with its actor (docs/api.md). */
  off_t at = lseek(fd, 0, SEEK_CUR);
  r->offset = at >= 0 ? (double)at : -1;
  int err = sm_fs_req_own_fd(r, fd);
  if (!err) {
    f->reader = smarm_self();
    err = sm_lsmarm_io_call_with(L, &r->base, SMARM_FOREVER, fname, trip_cleanup(h));
    f->reader = 0;
  }
  long n = err ? 0 : (long)r->len;
  if (n > 0 && at >= 0)
    lseek(fd, at + (off_t)n, SEEK_SET);
  if (n > 0 && f->rstart == f->rlen) { /* nothing held: the request's block becomes the buffer */
    free(f->rbuf);
    f->rbuf = r->data;
    f->rcap = most;
    f->rstart = 0;
    f->rlen = (size_t)n;
    r->data = NULL;
  } else if (n > 0) {
    if (f->rcap - f->rlen < (size_t)n) { /* slide down, then grow */
      memmove(f->rbuf, f->rbuf + f->rstart, f->rlen - f->rstart);
      f->rlen -= f->rstart;
      f->rstart = 0;
      if (f->rcap - f->rlen < (size_t)n) {
        size_t cap = f->rcap;
        while (cap - f->rlen < (size_t)n)
          cap *= 2;
        char *more = realloc(f->rbuf, cap);
        if (!more)
          return luaL_error(L, "not enough memory");
        f->rbuf = more;
        f->rcap = cap;
      }
    }
    memcpy(f->rbuf + f->rlen, r->data, (size_t)n);
    f->rlen += (size_t)n;
  }
  sm_lio_unbox(L, box);
  lua_settop(L, top);
  return err ? -sm_lio_push_failure(L, err, f->path) : n;
}

/* Pushes n read-ahead bytes as a string and drops them and `skip` more. */
static void take(lua_State *L, lfile_t *f, size_t n, size_t skip)
{
  lua_pushlstring(L, f->rbuf ? f->rbuf + f->rstart : "", n);
  f->rstart += n + skip;
}

enum pattern { LINE, LINE_KEEP, ALL, COUNT };

/* An offset argument of file:read and file:write: a whole number of bytes from 0 to 2^53. */
static lua_Number check_offset(lua_State *L, int idx)
{
  lua_Number off = luaL_checknumber(L, idx);
  luaL_argcheck(L, off >= 0 && off <= 9007199254740992.0 && off == (lua_Number)(int64_t)off, idx,
                "offset of at least 0 expected, a whole number of bytes");
  return off;
}

/* The pattern argument at idx: "*l", "*L", "*a" (the '*' optional) or a count (*count). */
static enum pattern pattern_of(lua_State *L, int idx, size_t *count)
{
  if (lua_type(L, idx) == LUA_TNUMBER) {
    lua_Number n = lua_tonumber(L, idx);
    luaL_argcheck(L, n >= 0 && n < 4294967296.0 && n == (lua_Number)(size_t)n, idx,
                  "byte count expected");
    *count = (size_t)n;
    return COUNT;
  }
  if (lua_isnoneornil(L, idx))
    return LINE;
  const char *p = luaL_checkstring(L, idx);
  p += *p == '*';
  if (strcmp(p, "l") == 0)
    return LINE;
  if (strcmp(p, "L") == 0)
    return LINE_KEEP;
  if (strcmp(p, "a") == 0)
    return ALL;
  return luaL_argerror(L, idx, "\"*l\", \"*L\", \"*a\" or a byte count expected");
}

/* Reads by pattern at the file's position, as Lua's io does: a line (without its "\n", or with
** it for "*L"; the last one may have none), nil at the end; everything left ("" at the end); n
** bytes, fewer only at the end, nil at the end (0 bytes: "", or nil at the end). Returns the
** values pushed. */
static int read_pattern(lua_State *L, lfile_t *f, enum pattern how, size_t count,
                        const char *fname)
{
  check_no_reader(L, f, fname);
  int64_t deadline = deadline_of(f);
  size_t scanned = 0; /* LINE: bytes already known to hold no newline */
  fd_hold_t hold = {0};
  int k = 1;
  for (;;) {
    size_t avail = f->rlen - f->rstart;
    const char *p = f->rbuf ? f->rbuf + f->rstart : NULL;
    if ((how == LINE || how == LINE_KEEP) && avail > scanned) {
      const char *nl = memchr(p + scanned, '\n', avail - scanned);
      if (nl) {
        size_t n = (size_t)(nl - p);
        take(L, f, how == LINE_KEEP ? n + 1 : n, how == LINE_KEEP ? 0 : 1);
        break;
      }
      scanned = avail;
    } else if (how == COUNT && avail >= count && (count > 0 || avail > 0)) {
      take(L, f, count, 0);
      break;
    }
    size_t most = how == COUNT && count - avail > READ_CHUNK ? count - avail : READ_CHUNK;
    int held = held_fd(L, f, &hold, strncmp(fname, "file.", 5) == 0 ? fname + 5 : fname);
    long n = held < 0 ? -sm_lio_push_failure(L, held, f->path)
                      : fill(L, f, &hold, most, deadline, fname);
    if (n < 0) {
      k = (int)-n;
      break;
    }
    if (n == 0) { /* the end */
      if (how == ALL || avail > 0)
        take(L, f, avail, 0);
      else
        lua_pushnil(L);
      break;
    }
  }
  release_fd(L, &hold);
  return k;
}

/* file:read([pattern]) / file:read(n, offset): by pattern at the file's position, or up to n
** bytes at offset (one read there: nil when offset is at or past the end; the position and the
** read-ahead stay as they are). */
static int f_read(lua_State *L)
{
  lfile_t *f = check_file(L, "read");
  size_t count = 0;
  enum pattern how = pattern_of(L, 2, &count);
  if (lua_isnoneornil(L, 3))
    return read_pattern(L, f, how, count, "file.read");
  luaL_argcheck(L, how == COUNT, 3, "an offset goes with a byte count");
  lua_Number off = check_offset(L, 3);
  lua_settop(L, 3);
  fs_req_t *r = new_bare_request(L, FS_READ);
  int box = lua_gettop(L);
  r->offset = off;
  r->len = count;
  r->data = malloc(r->len ? r->len : 1);
  if (!r->data)
    return luaL_error(L, "not enough memory");
  sm_lpark_actor(L, "file.read"); /* raise here, before there is a duplicate to close */
  sm_lpark_check(L, "file.read");
  int err = sm_fs_req_own_fd(r, f->fd);
  int k = err ? sm_lio_push_failure(L, err, f->path) : run(L, r, "file.read", f->path);
  if (!k) {
    if (r->len == 0 && count > 0)
      lua_pushnil(L);
    else
      lua_pushlstring(L, r->data, r->len);
    k = 1;
  }
  sm_lio_unbox(L, box);
  return k;
}

/* file:settimeout(seconds): how long a read at the file's position waits for data (nil or
** negative: no limit). */
static int f_settimeout(lua_State *L)
{
  lfile_t *f = check_file(L, "settimeout");
  f->timeout = sm_lpark_check_settimeout(L, 2);
  lua_pushboolean(L, 1);
  return 1;
}

/* The iterator of file:lines(): upvalues the file and the pattern. */
static int lines_next(lua_State *L)
{
  lfile_t *f = luaL_checkudata(L, lua_upvalueindex(1), FILE_MT);
  lua_settop(L, 0);
  lua_pushvalue(L, lua_upvalueindex(1));
  check_file(L, "lines");
  size_t count = 0;
  enum pattern how = pattern_of(L, lua_upvalueindex(2), &count);
  int n = read_pattern(L, f, how, count, "file.lines");
  if (n > 1) /* a failure: raised, as Lua's lines does */
    return luaL_error(L, "smarm.fs.lines: %s", lua_tostring(L, -n + 1));
  if (lua_isnil(L, -1) && lua_toboolean(L, lua_upvalueindex(3)))
    post_file_close(f); /* smarm.fs.lines: the end closes the file */
  return 1;
}

/* file:lines([pattern]) -> iterator (the file stays open at the end) */
static int f_lines(lua_State *L)
{
  check_file(L, "lines");
  size_t count;
  pattern_of(L, 2, &count);
  lua_settop(L, 2);
  lua_pushboolean(L, 0);
  lua_pushcclosure(L, lines_next, 3);
  return 1;
}

/* smarm.fs.lines(path [, pattern]) -> iterator: the file opened for reading, closed by the
** iterator at its end (or by its __gc); a file that cannot be opened raises, as io.lines does. */
static int l_lines(lua_State *L)
{
  luaL_checkstring(L, 1);
  size_t count;
  pattern_of(L, 2, &count);
  lua_settop(L, 2);
  lua_pushcfunction(L, l_open);
  lua_pushvalue(L, 1);
  lua_pushliteral(L, "r");
  lua_call(L, 2, 2);
  if (lua_isnil(L, -2))
    return luaL_error(L, "smarm.fs.lines: %s", lua_tostring(L, -1));
  lua_pop(L, 1);
  lua_pushvalue(L, 2);
  lua_pushboolean(L, 1);
  lua_pushcclosure(L, lines_next, 3);
  return 1;
}

/* file:seek([whence [, offset]]) -> position: whence "set", "cur" (default) or "end". */
static int f_seek(lua_State *L)
{
  lfile_t *f = check_file(L, "seek");
  static const char *const names[] = {"set", "cur", "end", NULL};
  static const int whences[] = {SEEK_SET, SEEK_CUR, SEEK_END};
  int which = luaL_checkoption(L, 2, "cur", names);
  lua_Number off = luaL_optnumber(L, 3, 0);
  luaL_argcheck(L, off == (lua_Number)(off_t)off, 3, "whole number of bytes expected");
  check_no_reader(L, f, "seek");
  unbuffer(f);
  off_t at = lseek(f->fd, (off_t)off, whences[which]);
  if (at < 0)
    return sm_lio_push_failure(L, -errno, f->path);
  lua_pushnumber(L, (lua_Number)at);
  return 1;
}

/* One write of len bytes of data through the pool on fd (f's, or its duplicate), at off (-1:
** the descriptor's position): 0 with *written set, or -k after pushing the k values of a
** failure. */
static int write_once(lua_State *L, lfile_t *f, int fd, fd_hold_t *h, const char *data,
                      size_t len, lua_Number off, size_t *written)
{
  int top = lua_gettop(L);
  fs_req_t *r = new_bare_request(L, FS_WRITE);
  int box = lua_gettop(L);
  r->offset = off;
  r->data = malloc(len ? len : 1);
  if (!r->data)
    return luaL_error(L, "not enough memory");
  memcpy(r->data, data, len);
  r->len = len;
  sm_lpark_actor(L, "file.write"); /* raise here, before there is a duplicate to close */
  sm_lpark_check(L, "file.write");
  int err = sm_fs_req_own_fd(r, fd);
  if (!err)
    err = sm_lsmarm_io_call_with(L, &r->base, SMARM_FOREVER, "file.write", trip_cleanup(h));
  *written = err ? 0 : r->len;
  sm_lio_unbox(L, box);
  lua_settop(L, top);
  return err ? -sm_lio_push_failure(L, err, f->path) : 0;
}

/* file:write(data [, offset]) -> bytes written. At the file's position with a time limit
** (file:settimeout), a FIFO or terminal is written a pipe's atomic size (PIPE_BUF) at a time,
** each once there is room: nil, "timeout", the bytes written, when the limit passes. */
static int f_write(lua_State *L)
{
  lfile_t *f = check_file(L, "write");
  size_t len;
  const char *data = sm_lbinary_checkbytes(L, 2, &len); /* a string or a binary */
  lua_Number off = -1; /* the file's position */
  if (!lua_isnoneornil(L, 3)) {
    off = check_offset(L, 3);
    /* Linux's pwrite on a descriptor opened with O_APPEND appends whatever the offset (pwrite(2),
    ** BUGS), and would report the write as made where it was asked; Go's WriteAt refuses such a
    ** file too. The flag is the open file's, so it is read from the descriptor, as it is now. */
    int fl = fcntl(f->fd, F_GETFL);
    luaL_argcheck(L, fl < 0 || !(fl & O_APPEND), 3,
                  "the file is open for appending (\"a\" or \"a+\"), where a write at an offset "
                  "would append");
  }
  if (off < 0 && other_reader(f)) {
    /* A read parked at the position of a file that can seek reads with pread and moves the
    ** position past its bytes only when it returns (fill): a write at the position meanwhile
    ** would land inside what it reads, and the read's move would undo the write's. Refused, as
    ** a seek is. A FIFO or terminal has separate streams: its reader goes on adding. */
    if (lseek(f->fd, 0, SEEK_CUR) >= 0)
      check_no_reader(L, f, "write");
  } else if (!other_reader(f)) { /* (a read parked at the position keeps its read-ahead) */
    unbuffer(f);
  }
  lua_settop(L, 3);
  int64_t deadline = off < 0 ? deadline_of(f) : -1;
  size_t done = 0;
  fd_hold_t hold = {0}; /* a write of several trips: each trip on its duplicate */
  int k = 0;
  while (deadline >= 0 && !f->unpollable && done < len) {
    int fd = held_fd(L, f, &hold, "write");
    int err = fd < 0 ? fd : wait_ready(L, f, fd, &hold, deadline, FS_WAIT_WRITE, "file.write");
    if (err == -ETIMEDOUT) {
      lua_pushnil(L);
      lua_pushliteral(L, "timeout");
      lua_pushnumber(L, (lua_Number)done);
      k = 3;
      break;
    }
    if (err) {
      k = sm_lio_push_failure(L, err, f->path);
      break;
    }
    if (f->unpollable)
      break; /* a regular file: the rest in one write */
    size_t n = len - done < PIPE_BUF ? len - done : PIPE_BUF, written;
    int failed = write_once(L, f, fd, &hold, data + done, n, -1, &written);
    if (failed < 0) {
      k = -failed;
      break;
    }
    done += written;
  }
  if (!k && (done < len || len == 0)) {
    size_t written;
    int failed = write_once(L, f, hold.box ? hold.req->fd : f->fd, &hold, data + done,
                            len - done, off, &written);
    if (failed < 0)
      k = -failed;
    done += written;
  }
  if (!k) {
    lua_pushnumber(L, (lua_Number)done);
    k = 1;
  }
  release_fd(L, &hold);
  return k;
}

static void post_file_close(lfile_t *f)
{
  if (f->fd < 0)
    return;
  sm_fs_post_close(f->fd);
  f->fd = -1;
}

/* The descriptor is closed before close returns (a FIFO's other end sees it at once, and what
** close(2) says is not lost); an actor stopped while it waits still has it closed (the request's).
** Where parking is refused (a __gc finalizer, a debug hook) the close is posted, as __gc's is. */
static int f_close(lua_State *L)
{
  lfile_t *f = check_file(L, "close");
  if (!sm_lpark_can(L)) {
    post_file_close(f);
    lua_pushboolean(L, 1);
    return 1;
  }
  fs_req_t *r = new_bare_request(L, FS_CLOSE);
  int box = lua_gettop(L);
  check_file(L, "close"); /* again: a finalizer run by that allocation may have closed it */
  r->fd = f->fd;
  r->fd_owned = 1;
  f->fd = -1;
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, "file.close");
  sm_lio_unbox(L, box); /* frees it now: closes the descriptor if the work never ran */
  if (err)
    return sm_lio_push_failure(L, err, f->path);
  lua_pushboolean(L, 1);
  return 1;
}

static int f_gc(lua_State *L)
{
  lfile_t *f = lua_touserdata(L, 1);
  if (!file_stale(f)) /* a stale file's descriptor went with its run (sm_lfs_end_run) */
    post_file_close(f);
  free(f->path);
  f->path = NULL;
  free(f->rbuf);
  f->rbuf = NULL;
  return 0;
}

static int f_tostring(lua_State *L)
{
  lfile_t *f = lua_touserdata(L, 1);
  lua_pushfstring(L, "fs.file (%s)", file_stale(f) ? "closed with an earlier run"
                                    : f->fd < 0 ? "closed" : f->path ? f->path : "?");
  return 1;
}

/* ---- Files in messages (lhandle.h): only the descriptor travels ------------------------------ */

static int file_test(lua_State *L, int idx, void **file, lhandle_t *h)
{
  lfile_t *f = luaL_testudata(L, idx, FILE_MT);
  if (!f)
    return 0;
  if (file_stale(f))
    luaL_error(L, "smarm.send: the file belongs to an earlier run");
  if (f->handed || f->fd < 0)
    luaL_error(L, "smarm.send: the file is %s", f->handed ? "handed to another actor" : "closed");
  if (other_reader(f))
    luaL_error(L, "smarm.send: the file is in use by another actor");
  unbuffer(f); /* the receiver reads on from the position the sender had reached */
  if (f->rlen > f->rstart) /* it cannot seek (a FIFO, a terminal): the bytes would be lost */
    luaL_error(L, "smarm.send: the file holds bytes read ahead that cannot be handed over (it "
                  "cannot seek)");
  memset(h, 0, sizeof *h);
  h->fd = f->fd;
  h->timeout = f->timeout;
  *file = f;
  return 1;
}

static void file_handed_over(void *file)
{
  lfile_t *f = file;
  f->handed = 1;
  f->fd = -1; /* the new owner closes it */
}

static void file_push(lua_State *L, const lhandle_t *h)
{
  lfile_t *f = lua_newuserdata(L, sizeof *f);
  file_made(L, f, h->fd, NULL);
  f->timeout = h->timeout;
  f->path = strdup("(a file handed over)"); /* only after file_made, which may raise */
}

static void file_drop(const lhandle_t *h) { sm_fs_post_close(h->fd); }

/* Its owner ended abnormally: closed at once (a read or write in flight, even the ended owner's
** own, works on its duplicate, which its request closes when freed). */
static void file_close_owned(void *file)
{
  lfile_t *f = file;
  if (!file_stale(f) && !f->handed)
    post_file_close(f);
}

static const lhandle_kind_t file_kind = {file_test, file_handed_over, file_push, file_drop,
                                         file_close_owned, NULL, NULL};

void sm_lfs_end_run(lua_State *L)
{
  lua_pushlightuserdata(L, (void *)&open_files_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lfile_t *f = lua_touserdata(L, -2);
    if (f->fd >= 0) /* no pool work is in flight any more (sm_io_shutdown): close it here */
      close(f->fd);
    f->fd = -1;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_pushlightuserdata(L, (void *)&open_files_key);
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

static const luaL_Reg file_methods[] = {
  {"read", f_read}, {"write", f_write}, {"lines", f_lines},
  {"seek", f_seek}, {"close", f_close}, {"settimeout", f_settimeout}, {NULL, NULL},
};

static const luaL_Reg fs_functions[] = {
  {"readfile", l_readfile}, {"writefile", l_writefile}, {"stat", l_stat},
  {"unlink", l_unlink},     {"rmdir", l_rmdir},         {"rename", l_rename},
  {"mkdir", l_mkdir},       {"scandir", l_scandir},     {"open", l_open},
  {"lines", l_lines},       {NULL, NULL},
};

void sm_lfs_register(lua_State *L, int module)
{
  sm_lhandle_register(&file_kind);
  sm_lio_handle_metatable(L, FILE_MT, file_methods, f_gc, f_tostring);
  sm_lio_add_table(L, module, "fs", fs_functions);
}
