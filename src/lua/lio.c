/*
** smarm.fs: files for Lua actors, done on the IO thread (src/io/io.h) so that a slow disk parks
** only the calling actor. Every call copies its arguments into its request (the IO side may still
** be working when the actor is gone) and returns its results, or nil, message, code where the
** code is libuv's error name ("ENOENT"). Misuse (wrong argument types, outside an actor) raises.
*/
#define _GNU_SOURCE
#include "lio.h"

#include "io/dns.h"
#include "io/proc.h"
#include "io/io.h"
#include "lsmarm.h"
#include "ltcp.h"

#include <lauxlib.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum fs_op { FS_READFILE, FS_WRITEFILE, FS_STAT, FS_UNLINK, FS_RENAME, FS_MKDIR, FS_RMDIR,
             FS_SCANDIR, FS_OPEN, FS_READ, FS_WRITE, FS_CLOSE };

typedef struct fs_entry {
  char *name;
  unsigned char type; /* DT_* */
} fs_entry_t;

typedef struct fs_req {
  io_req_t base;
  enum fs_op op;
  char *path, *path2;
  char *data;         /* writefile: the bytes to write; readfile: the bytes read */
  size_t len;
  int mode;
  struct stat st;
  fs_entry_t *entries; /* scandir */
  size_t count;
  int fd, flags;       /* open (result fd), read, write, close */
  double offset;       /* read, write: where (negative: the file's position) */
} fs_req_t;

/* ---- The work, on a thread of libuv's pool ------------------------------------------------ */

static int read_all(fs_req_t *r)
{
  int fd = open(r->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  size_t cap = 0;
  if (fstat(fd, &r->st) == 0 && S_ISREG(r->st.st_mode) && r->st.st_size > 0)
    cap = (size_t)r->st.st_size + 1; /* one more byte: a read returning 0 ends the loop */
  if (cap < 4096)
    cap = 4096;
  r->data = malloc(cap);
  int err = r->data ? 0 : -ENOMEM;
  while (!err) {
    if (r->len == cap) {
      char *more = realloc(r->data, cap * 2);
      if (!more) {
        err = -ENOMEM;
        break;
      }
      r->data = more;
      cap *= 2;
    }
    ssize_t n = read(fd, r->data + r->len, cap - r->len);
    if (n < 0 && errno == EINTR && !io_interrupted())
      continue;
    if (n < 0)
      err = -errno;
    else if (n == 0)
      break;
    else
      r->len += (size_t)n;
  }
  close(fd);
  return err;
}

/* Writes all len bytes of data to fd, at offset (negative: the file's position); 0 or -errno.
** *done says how many went out either way. */
static int write_fd(int fd, const char *data, size_t len, double offset, size_t *done)
{
  int err = 0;
  *done = 0;
  while (*done < len && !err) {
    ssize_t n = offset >= 0 ? pwrite(fd, data + *done, len - *done, (off_t)offset + (off_t)*done)
                            : write(fd, data + *done, len - *done);
    if (n < 0 && (errno != EINTR || io_interrupted())) /* io.h: give up when stopping */
      err = -errno;
    else if (n > 0)
      *done += (size_t)n;
  }
  return err;
}

static int write_all(fs_req_t *r)
{
  int fd = open(r->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, r->mode);
  if (fd < 0)
    return -errno;
  size_t done;
  int err = write_fd(fd, r->data, r->len, -1, &done);
  if (close(fd) != 0 && !err)
    err = -errno;
  return err;
}

static int compare_entries(const void *a, const void *b)
{
  return strcmp(((const fs_entry_t *)a)->name, ((const fs_entry_t *)b)->name);
}

static int scan(fs_req_t *r)
{
  DIR *d = opendir(r->path);
  if (!d)
    return -errno;
  size_t cap = 0;
  int err = 0;
  struct dirent *e;
  errno = 0;
  while (!err && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (r->count == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      fs_entry_t *more = realloc(r->entries, ncap * sizeof *more);
      if (!more) {
        err = -ENOMEM;
        break;
      }
      r->entries = more;
      cap = ncap;
    }
    char *name = strdup(e->d_name);
    if (!name) {
      err = -ENOMEM;
      break;
    }
    r->entries[r->count].name = name;
    r->entries[r->count++].type = e->d_type;
  }
  if (!err && errno)
    err = -errno;
  closedir(d);
  if (!err && r->count > 1) /* qsort of an empty folder's NULL list would be undefined */
    qsort(r->entries, r->count, sizeof *r->entries, compare_entries);
  return err;
}

static void fs_work(io_req_t *req)
{
  fs_req_t *r = (fs_req_t *)req;
  int err = 0;
  switch (r->op) {
  case FS_READFILE: err = read_all(r); break;
  case FS_WRITEFILE: err = write_all(r); break;
  case FS_STAT: err = stat(r->path, &r->st) == 0 ? 0 : -errno; break;
  case FS_UNLINK: err = unlink(r->path) == 0 ? 0 : -errno; break;
  case FS_RENAME: err = rename(r->path, r->path2) == 0 ? 0 : -errno; break;
  case FS_MKDIR: err = mkdir(r->path, (mode_t)r->mode) == 0 ? 0 : -errno; break;
  case FS_RMDIR: err = rmdir(r->path) == 0 ? 0 : -errno; break;
  case FS_SCANDIR: err = scan(r); break;
  case FS_OPEN:
    r->fd = open(r->path, r->flags | O_CLOEXEC, r->mode);
    err = r->fd < 0 ? -errno : 0;
    break;
  case FS_READ: {
    ssize_t n;
    do
      n = r->offset >= 0 ? pread(r->fd, r->data, r->len, (off_t)r->offset)
                         : read(r->fd, r->data, r->len);
    while (n < 0 && errno == EINTR && !io_interrupted()); /* io.h: give up when stopping */
    err = n < 0 ? -errno : 0;
    r->len = n < 0 ? 0 : (size_t)n;
    break;
  }
  case FS_WRITE: {
    size_t done;
    err = write_fd(r->fd, r->data, r->len, r->offset, &done);
    r->len = done;
    break;
  }
  case FS_CLOSE: err = close(r->fd) == 0 ? 0 : -errno; break;
  }
  req->err = err;
}

static void fs_free(io_req_t *req)
{
  fs_req_t *r = (fs_req_t *)req;
  free(r->path);
  free(r->path2);
  free(r->data);
  for (size_t i = 0; i < r->count; i++)
    free(r->entries[i].name);
  free(r->entries);
}

/* ---- The Lua side ------------------------------------------------------------------------- */

int lio_push_failure(lua_State *L, int err, const char *subject)
{
  lua_pushnil(L);
  if (err == -ETIMEDOUT) {
    lua_pushliteral(L, "timeout");
    return 2;
  }
  if (subject)
    lua_pushfstring(L, "%s: %s", subject, io_strerror(err));
  else
    lua_pushstring(L, io_strerror(err));
  lua_pushstring(L, io_err_name(err));
  return 3;
}


char *lio_copy_arg(lua_State *L, int idx, size_t *len)
{
  size_t n;
  const char *s = luaL_checklstring(L, idx, &n);
  char *c = malloc(n + 1);
  if (!c)
    luaL_error(L, "not enough memory");
  memcpy(c, s, n + 1);
  if (len)
    *len = n;
  return c;
}

static int request_gc(lua_State *L)
{
  io_req_t **box = lua_touserdata(L, 1);
  io_req_release(*box);
  *box = NULL;
  return 0;
}

static const char req_mt_key = 0;

int lio_box(lua_State *L, io_req_t *req)
{
  if (!req)
    return luaL_error(L, "not enough memory");
  io_req_t **box = lua_newuserdata(L, sizeof *box);
  *box = NULL;
  lua_pushlightuserdata(L, (void *)&req_mt_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, request_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushlightuserdata(L, (void *)&req_mt_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  lua_setmetatable(L, -2);
  *box = req;
  return lua_gettop(L);
}

void lio_unbox(lua_State *L, int idx)
{
  io_req_t **box = lua_touserdata(L, idx);
  io_req_release(*box);
  *box = NULL;
}

/* A request for op, boxed at the top of the stack (lio_box). */
static fs_req_t *new_bare_request(lua_State *L, enum fs_op op)
{
  fs_req_t *r = (fs_req_t *)io_req_new(sizeof *r, fs_work, fs_free);
  lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->op = op;
  r->fd = -1;
  r->offset = -1;
  return r;
}

/* The same with path (argument 1) copied. */
static fs_req_t *new_request(lua_State *L, enum fs_op op)
{
  luaL_checkstring(L, 1);
  fs_req_t *r = new_bare_request(L, op);
  r->path = lio_copy_arg(L, 1, NULL);
  return r;
}

/* Runs r on the IO thread. Returns 0, or pushes nil, "<subject>: <reason>", code and returns 3. */
static int run(lua_State *L, fs_req_t *r, const char *fname, const char *subject)
{
  int err = lsmarm_io_call(L, &r->base, SMARM_FOREVER, fname);
  return err ? lio_push_failure(L, err, subject) : 0;
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
  lio_unbox(L, box);
  return n;
}

static int l_writefile(lua_State *L)
{
  luaL_checkstring(L, 2);
  lua_settop(L, 2);
  fs_req_t *r = new_request(L, FS_WRITEFILE);
  int box = lua_gettop(L);
  r->data = lio_copy_arg(L, 2, &r->len);
  r->mode = 0666;
  int n = run(L, r, "fs.writefile", r->path);
  if (!n) {
    lua_pushboolean(L, 1);
    n = 1;
  }
  lio_unbox(L, box);
  return n;
}

static const char *type_name(mode_t m)
{
  return S_ISREG(m) ? "file" : S_ISDIR(m) ? "directory" : S_ISLNK(m) ? "link"
       : S_ISFIFO(m) ? "fifo" : S_ISSOCK(m) ? "socket" : S_ISCHR(m) ? "char"
       : S_ISBLK(m) ? "block" : "unknown";
}

static int l_stat(lua_State *L)
{
  fs_req_t *r = new_request(L, FS_STAT);
  int box = lua_gettop(L);
  int n = run(L, r, "fs.stat", r->path);
  if (n) {
    lio_unbox(L, box);
    return n;
  }
  lua_createtable(L, 0, 5);
  lua_pushnumber(L, (lua_Number)r->st.st_size);
  lua_setfield(L, -2, "size");
  lua_pushstring(L, type_name(r->st.st_mode));
  lua_setfield(L, -2, "type");
  lua_pushnumber(L, (lua_Number)(r->st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  lua_pushnumber(L, (lua_Number)r->st.st_mtim.tv_sec + r->st.st_mtim.tv_nsec / 1e9);
  lua_setfield(L, -2, "mtime");
  lio_unbox(L, box);
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
  if (op == FS_RENAME)
    r->path2 = lio_copy_arg(L, 2, NULL);
  int n = run(L, r, fname, r->path);
  if (!n) {
    lua_pushboolean(L, 1);
    n = 1;
  }
  lio_unbox(L, box);
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
    lio_unbox(L, box);
    return n;
  }
  lua_createtable(L, (int)r->count, 0);
  for (size_t i = 0; i < r->count; i++) {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, r->entries[i].name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, type_name(DTTOIF(r->entries[i].type))); /* DT_UNKNOWN: 0, "unknown" */
    lua_setfield(L, -2, "type");
    lua_rawseti(L, -2, (int)i + 1);
  }
  lio_unbox(L, box);
  return 1;
}

/* ---- Files: smarm.fs.open and its handles ------------------------------------------------ */

#define FILE_MT "smarm.fs.file"

typedef struct lfile {
  int fd;      /* -1 once closed or handed over */
  int busy;    /* reads and writes in flight (actors of this VM are parked in them) */
  int closing; /* close() came while busy: the last of them closes */
  int handed;  /* sent in a message: another actor has it */
  uint32_t run; /* the run that made it (lsmarm_run_generation): its end closed the file */
  char *path;
} lfile_t;

/* Registry key of the VM's open files (weak keys: file userdata -> true), for lio_end_run. */
static const char open_files_key = 0;

/* A file of a run that has ended: that run's end closed its descriptor, whose number may be
** another file's now. */
static int file_stale(const lfile_t *f) { return f->run != lsmarm_run_generation(); }

/* Sets the metatable of the new file userdata on top and records it as open in its VM. */
static void file_made(lua_State *L, lfile_t *f, int fd, char *path)
{
  f->fd = fd;
  f->busy = f->closing = f->handed = 0;
  f->run = lsmarm_run_generation();
  f->path = path;
  luaL_getmetatable(L, FILE_MT);
  lua_setmetatable(L, -2);
  lua_pushlightuserdata(L, (void *)&open_files_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushlightuserdata(L, (void *)&open_files_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

static void post_file_close(lfile_t *f);

/* Brackets a read or write: the descriptor must not be closed (and its number reused) while a
** pool thread works with it, so a close that comes meanwhile waits for the last of them. */
static void file_enter(lfile_t *f) { f->busy++; }

static void file_leave(lfile_t *f)
{
  if (--f->busy == 0 && f->closing)
    post_file_close(f);
}

static lfile_t *check_file(lua_State *L, const char *fname)
{
  lfile_t *f = luaL_checkudata(L, 1, FILE_MT);
  if (file_stale(f))
    luaL_error(L, "smarm.fs.%s: the file belongs to an earlier run", fname);
  if (f->handed)
    luaL_error(L, "smarm.fs.%s: the file was handed to another actor", fname);
  if (f->fd < 0 || f->closing)
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
    n = 1;
  }
  lio_unbox(L, box);
  return n;
}

/* file:read(n [, offset]) -> bytes ("" at the end of the file) */
static int f_read(lua_State *L)
{
  lfile_t *f = check_file(L, "read");
  lua_Number n = luaL_checknumber(L, 2);
  luaL_argcheck(L, n >= 0 && n < 4294967296.0 && n == (lua_Number)(size_t)n, 2,
                "byte count expected");
  lua_Number off = luaL_optnumber(L, 3, -1);
  luaL_argcheck(L, off == -1 || off >= 0, 3, "offset of at least 0 expected");
  lua_settop(L, 3);
  fs_req_t *r = new_bare_request(L, FS_READ);
  int box = lua_gettop(L);
  r->fd = f->fd;
  r->offset = off;
  r->len = (size_t)n;
  r->data = malloc(r->len ? r->len : 1);
  if (!r->data)
    return luaL_error(L, "not enough memory");
  file_enter(f);
  int k = run(L, r, "file.read", f->path);
  file_leave(f);
  if (!k) {
    lua_pushlstring(L, r->data, r->len);
    k = 1;
  }
  lio_unbox(L, box);
  return k;
}

/* file:write(data [, offset]) -> bytes written */
static int f_write(lua_State *L)
{
  lfile_t *f = check_file(L, "write");
  luaL_checkstring(L, 2);
  lua_Number off = luaL_optnumber(L, 3, -1);
  luaL_argcheck(L, off == -1 || off >= 0, 3, "offset of at least 0 expected");
  lua_settop(L, 3);
  fs_req_t *r = new_bare_request(L, FS_WRITE);
  int box = lua_gettop(L);
  r->fd = f->fd;
  r->offset = off;
  r->data = lio_copy_arg(L, 2, &r->len);
  file_enter(f);
  int k = run(L, r, "file.write", f->path);
  file_leave(f);
  if (!k) {
    lua_pushnumber(L, (lua_Number)r->len);
    k = 1;
  }
  lio_unbox(L, box);
  return k;
}

/* Closing does not wait: the close runs on the pool (here when there is no IO thread). */
static void post_fd_close(int fd)
{
  fs_req_t *r = (fs_req_t *)io_req_new(sizeof *r, fs_work, fs_free);
  if (r) {
    r->op = FS_CLOSE;
    r->fd = fd;
    if (io_post(&r->base) < 0) /* no IO thread (the runtime ended): close here */
      close(fd);
  } else {
    close(fd);
  }
}

static void post_file_close(lfile_t *f)
{
  if (f->fd < 0)
    return;
  post_fd_close(f->fd);
  f->fd = -1;
}

static int f_close(lua_State *L)
{
  lfile_t *f = check_file(L, "close");
  if (f->busy)
    f->closing = 1;
  else
    post_file_close(f);
  lua_pushboolean(L, 1);
  return 1;
}

static int f_gc(lua_State *L)
{
  lfile_t *f = lua_touserdata(L, 1);
  if (!file_stale(f)) /* a stale file's descriptor went with its run (lio_end_run) */
    post_file_close(f);
  free(f->path);
  f->path = NULL;
  return 0;
}

static int f_tostring(lua_State *L)
{
  lfile_t *f = lua_touserdata(L, 1);
  lua_pushfstring(L, "fs.file (%s)", file_stale(f) ? "closed with an earlier run"
                                    : f->fd < 0 ? "closed" : f->path ? f->path : "?");
  return 1;
}

int lio_file_handle_of(lua_State *L, int idx, void **file, ltcp_handle_t *h)
{
  lfile_t *f = luaL_testudata(L, idx, FILE_MT);
  if (!f)
    return 0;
  if (file_stale(f))
    luaL_error(L, "smarm.send: the file belongs to an earlier run");
  if (f->handed || f->fd < 0 || f->closing)
    luaL_error(L, "smarm.send: the file is %s", f->handed ? "handed to another actor" : "closed");
  if (f->busy)
    luaL_error(L, "smarm.send: the file is in use by another actor");
  memset(h, 0, sizeof *h);
  h->file = 1;
  h->fd = f->fd;
  *file = f;
  return 1;
}

void lio_file_handed_over(void *file)
{
  lfile_t *f = file;
  f->handed = 1;
  f->fd = -1; /* the new owner closes it */
}

void lio_push_file(lua_State *L, const ltcp_handle_t *h)
{
  lfile_t *f = lua_newuserdata(L, sizeof *f);
  file_made(L, f, h->fd, strdup("(a file handed over)"));
}

void lio_end_run(lua_State *L)
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
    if (f->fd >= 0) /* no pool work is in flight any more (io_shutdown): close it here */
      close(f->fd);
    f->fd = -1;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_pushlightuserdata(L, (void *)&open_files_key);
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

void lio_drop_file(const ltcp_handle_t *h)
{
  post_fd_close(h->fd);
}

static const luaL_Reg file_methods[] = {
  {"read", f_read}, {"write", f_write}, {"close", f_close}, {NULL, NULL},
};

/* ---- smarm.dns ---------------------------------------------------------------------------- */

/* getaddrinfo(host [, service [, timeout]]) -> { {addr =, family =, port =}, ... } */
static int l_getaddrinfo(lua_State *L)
{
  luaL_checkstring(L, 1);
  if (!lua_isnoneornil(L, 2))
    luaL_checkstring(L, 2); /* a number too (a port) */
  double timeout = luaL_optnumber(L, 3, -1);
  lua_settop(L, 3);
  dns_req_t *r = dns_req_new();
  int box = lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->host = lio_copy_arg(L, 1, NULL);
  if (!lua_isnil(L, 2))
    r->service = lio_copy_arg(L, 2, NULL); /* a number converts */
  int err = lsmarm_io_call(L, &r->base, lsmarm_timeout_ns(timeout), "dns.getaddrinfo");
  int n = 1;
  if (err) {
    n = lio_push_failure(L, err, r->host);
  } else {
    lua_createtable(L, (int)r->count, 0);
    for (size_t i = 0; i < r->count; i++) {
      lua_createtable(L, 0, 3);
      lua_pushstring(L, r->entries[i].addr);
      lua_setfield(L, -2, "addr");
      lua_pushstring(L, r->entries[i].family == 6 ? "inet6" : "inet");
      lua_setfield(L, -2, "family");
      lua_pushinteger(L, r->entries[i].port);
      lua_setfield(L, -2, "port");
      lua_rawseti(L, -2, (int)i + 1);
    }
  }
  lio_unbox(L, box);
  return n;
}

/* ---- smarm.process ------------------------------------------------------------------------ */

/* A NULL-terminated malloc'd copy of the strings of the array at idx (raises on a non-string). */
static char **string_list(lua_State *L, int idx, const char *what)
{
  size_t n = lua_objlen(L, idx);
  char **v = calloc(n + 1, sizeof *v);
  if (!v)
    luaL_error(L, "not enough memory");
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, idx, (int)i + 1);
    const char *s = lua_tostring(L, -1);
    char *c = s ? strdup(s) : NULL;
    lua_pop(L, 1);
    if (!c) {
      for (size_t j = 0; j < i; j++)
        free(v[j]);
      free(v);
      luaL_error(L, s ? "not enough memory" : "%s[%d] is not a string", what, (int)i + 1);
    }
    v[i] = c;
  }
  return v;
}

/* run(argv [, opts]) -> { status =, signal =, stdout =, stderr = } */
static int l_run(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_argcheck(L, lua_objlen(L, 1) >= 1, 1, "argv with at least the program expected");
  if (!lua_isnoneornil(L, 2))
    luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  proc_req_t *r = proc_run_new();
  int box = lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->argv = string_list(L, 1, "argv");
  double timeout = -1;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "cwd");
    if (!lua_isnil(L, -1))
      r->cwd = lio_copy_arg(L, lua_gettop(L), NULL);
    lua_getfield(L, 2, "stdin");
    if (!lua_isnil(L, -1))
      r->input = lio_copy_arg(L, lua_gettop(L), &r->input_len);
    lua_getfield(L, 2, "timeout");
    if (!lua_isnil(L, -1))
      timeout = luaL_checknumber(L, -1);
    lua_getfield(L, 2, "env");
    if (!lua_isnil(L, -1)) {
      luaL_checktype(L, -1, LUA_TTABLE);
      lua_newtable(L); /* as NAME=value strings */
      int list = lua_gettop(L), n = 0;
      lua_pushnil(L);
      while (lua_next(L, list - 1) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1))
          return luaL_error(L, "smarm.process.run: opts.env must map names to strings");
        lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
        lua_rawseti(L, list, ++n);
        lua_pop(L, 1);
      }
      r->env = string_list(L, list, "env");
    }
    lua_settop(L, box);
  }
  int err = lsmarm_io_call(L, &r->base, lsmarm_timeout_ns(timeout), "process.run");
  int n = 1;
  if (err) {
    n = lio_push_failure(L, err, r->argv[0]);
  } else {
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, (lua_Number)r->status);
    lua_setfield(L, -2, "status");
    if (r->term_signal) {
      lua_pushinteger(L, r->term_signal);
      lua_setfield(L, -2, "signal");
    }
    lua_pushlstring(L, r->out ? r->out : "", r->out_len);
    lua_setfield(L, -2, "stdout");
    lua_pushlstring(L, r->err ? r->err : "", r->err_len);
    lua_setfield(L, -2, "stderr");
  }
  lio_unbox(L, box);
  return n;
}

/* ---- smarm.signal ------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int signum;
} signal_names[] = {
  {"SIGINT", SIGINT},   {"SIGTERM", SIGTERM}, {"SIGHUP", SIGHUP},
  {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGQUIT", SIGQUIT},
};

/* wait(name [, timeout]) -> name | nil, "timeout" */
static int l_signal_wait(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  int signum = 0;
  for (size_t i = 0; i < sizeof signal_names / sizeof *signal_names; i++)
    if (strcmp(name, signal_names[i].name) == 0)
      signum = signal_names[i].signum;
  if (!signum)
    return luaL_argerror(L, 1, "SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 or SIGQUIT expected");
  double timeout = luaL_optnumber(L, 2, -1);
  lua_settop(L, 2);
  proc_req_t *r = proc_signal_new();
  int box = lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->signum = signum;
  int err = lsmarm_io_call(L, &r->base, lsmarm_timeout_ns(timeout), "signal.wait");
  int n = 1;
  if (err) {
    n = lio_push_failure(L, err, NULL);
  } else {
    lua_pushstring(L, name);
  }
  lio_unbox(L, box);
  return n;
}

static const luaL_Reg fs_functions[] = {
  {"readfile", l_readfile}, {"writefile", l_writefile}, {"stat", l_stat},
  {"unlink", l_unlink},     {"rmdir", l_rmdir},         {"rename", l_rename},
  {"mkdir", l_mkdir},       {"scandir", l_scandir},     {"open", l_open},
  {NULL, NULL},
};

void lio_handle_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                          lua_CFunction gc, lua_CFunction tostring)
{
  if (luaL_newmetatable(L, name)) {
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
}

void lio_register(lua_State *L, int module)
{
  lio_handle_metatable(L, FILE_MT, file_methods, f_gc, f_tostring);
  lua_newtable(L);
  luaL_register(L, NULL, fs_functions);
  lua_setfield(L, module, "fs");
  lua_newtable(L);
  lua_pushcfunction(L, l_getaddrinfo);
  lua_setfield(L, -2, "getaddrinfo");
  lua_setfield(L, module, "dns");
  lua_newtable(L);
  lua_pushcfunction(L, l_run);
  lua_setfield(L, -2, "run");
  lua_setfield(L, module, "process");
  lua_newtable(L);
  lua_pushcfunction(L, l_signal_wait);
  lua_setfield(L, -2, "wait");
  lua_setfield(L, module, "signal");
}
