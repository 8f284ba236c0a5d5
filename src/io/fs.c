/*
** File-system work on libuv's pool (see fs.h). Everything here runs on a pool thread, except
** sm_fs_req_new, sm_fs_wait_new and sm_fs_post_close (any thread) and the waits (the IO thread's
** alone: a wait, the list of them, and the poll handle each holds).
*/
#define _GNU_SOURCE
#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <uv.h>

/* open(2), again after an EINTR unless the work is to give up (sm_io_interrupted): a FIFO's
** open blocks, and the interrupt of another work may reach it (io.c). */
/* The descriptor of this process that path names (/dev/stdin, /dev/stdout, /dev/stderr,
** /dev/fd/N, /proc/self/fd/N), or -1. */
static int own_descriptor(const char *path)
{
  static const char *const std_names[] = {"/dev/stdin", "/dev/stdout", "/dev/stderr"};
  for (int i = 0; i < 3; i++)
    if (strcmp(path, std_names[i]) == 0)
      return i;
  const char *n = strncmp(path, "/dev/fd/", 8) == 0          ? path + 8
                  : strncmp(path, "/proc/self/fd/", 14) == 0 ? path + 14
                                                               : NULL;
  if (!n || *n < '0' || *n > '9')
    return -1;
  char *end;
  errno = 0;
  long v = strtol(n, &end, 10);
  return *end == '\0' && errno == 0 && v <= INT_MAX ? (int)v : -1;
}

static int open_file(const char *path, int flags, int mode)
{
  int fd;
  do
    fd = open(path, flags | O_CLOEXEC, mode);
  while (fd < 0 && errno == EINTR && !sm_io_interrupted());
  if (fd < 0 && errno == ENXIO) {
    /* A socket (a standard input that a parent made with socketpair, as libuv and Node do, or
    ** an inetd-style service's) cannot be opened through its /proc link on Linux: the file is
    ** then a duplicate of the process's own descriptor (sharing its flags, as a socket has no
    ** position to share). */
    int own = own_descriptor(path);
    if (own >= 0)
      fd = fcntl(own, F_DUPFD_CLOEXEC, 0);
    else
      errno = ENXIO;
  }
  return fd;
}

static int read_all(fs_req_t *r)
{
  int fd = open_file(r->path, O_RDONLY, 0);
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
    /* On every round, not only after an EINTR: a source that never blocks (/dev/zero, a FIFO
    ** fed without pause) never returns one, and would be read until malloc failed after its
    ** actor was killed or the runtime ended (io.h). What was read is nobody's then. */
    if (sm_io_interrupted()) {
      err = -EINTR;
      break;
    }
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
    if (n < 0 && errno == EINTR && !sm_io_interrupted())
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
  struct stat st;
  int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  while (*done < len && !err) {
    /* After a partial write, as after an EINTR: a reader that takes a little at a time (a pipe,
    ** a terminal) never makes the write fail with EINTR, and would hold the pool thread after
    ** the actor was killed or the runtime ended. Not before the first round, nor on a regular
    ** file, which Linux writes in parts past 2 GiB: a write the actor made to one is made
    ** (io.c), whole. */
    if (*done > 0 && !regular && sm_io_interrupted()) {
      err = -EINTR;
      break;
    }
    ssize_t n = offset >= 0 ? pwrite(fd, data + *done, len - *done, (off_t)offset + (off_t)*done)
                            : write(fd, data + *done, len - *done);
    if (n < 0 && (errno != EINTR || sm_io_interrupted())) /* io.h: give up when stopping */
      err = -errno;
    else if (n > 0)
      *done += (size_t)n;
  }
  return err;
}

static int write_all(fs_req_t *r)
{
  int fd = open_file(r->path, O_WRONLY | O_CREAT | O_TRUNC, r->mode);
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
    r->entries[r->count++].type = DTTOIF(e->d_type); /* DT_UNKNOWN: 0 */
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
    r->fd = open_file(r->path, r->flags, r->mode);
    err = r->fd < 0 ? -errno : 0;
    break;
  case FS_READ: {
    ssize_t n;
    do
      n = r->offset >= 0 ? pread(r->fd, r->data, r->len, (off_t)r->offset)
                         : read(r->fd, r->data, r->len);
    while (n < 0 && errno == EINTR && !sm_io_interrupted()); /* io.h: give up when stopping */
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
  case FS_CLOSE: /* closed here, so not again when freed (whatever close says, fd is gone) */
    err = close(r->fd) == 0 ? 0 : -errno;
    r->fd_owned = 0;
    break;
  case FS_WAIT: err = -EINVAL; break; /* the IO thread's (sm_fs_wait_new) */
  }
  req->err = err;
}

static void fs_free(io_req_t *req)
{
  fs_req_t *r = (fs_req_t *)req;
  /* an open's descriptor that nobody took (its actor was killed before it read the answer;
  ** the binding sets fd to -1 when it takes one) */
  if (r->fd_owned || (r->op == FS_OPEN && r->fd >= 0))
    close(r->fd);
  free(r->path);
  free(r->path2);
  free(r->data);
  for (size_t i = 0; i < r->count; i++)
    free(r->entries[i].name);
  free(r->entries);
}

fs_req_t *sm_fs_req_new(enum fs_op op)
{
  fs_req_t *r = (fs_req_t *)sm_io_req_new(sizeof *r, fs_work, fs_free);
  if (r) {
    r->op = op;
    r->fd = -1;
    r->offset = -1;
  }
  return r;
}

/* ---- Waiting for a descriptor to be readable or writable (the IO thread) ---------------------- */

/* A wait polls an epoll instance of its own that watches the request's duplicate: libuv's poll
** (uv_poll_init) makes the descriptor it is given non-blocking, and O_NONBLOCK is a flag of the
** open file, shared with the file's other users (the pool's reads and writes of other actors,
** a terminal's shell, stdout on the same terminal description), which would meet EAGAIN while it
** is set. The epoll descriptor is the wait's alone; epoll_ctl changes no flag of the file. */
typedef struct fs_wait {
  uv_poll_t poll;
  int epfd;
  fs_req_t *req;
  struct fs_wait *prev, *next; /* every wait under way, for the IO thread's stop */
} fs_wait_t;

static fs_wait_t *all_waits;

static void wait_closed(uv_handle_t *h)
{
  fs_wait_t *w = h->data;
  close(w->epfd); /* out of the loop since uv_close */
  free(w);
}

/* Ends wait w with err. Closing the poll handle takes its epoll descriptor out of the loop at
** once (uv_close), and that one holds no reference to the file, so the request may close its
** duplicate as soon as it is freed; the epoll descriptor is closed with w (wait_closed). */
static void wait_end(fs_wait_t *w, int err)
{
  if (w->prev)
    w->prev->next = w->next;
  else
    all_waits = w->next;
  if (w->next)
    w->next->prev = w->prev;
  fs_req_t *r = w->req;
  r->base.uv = NULL;
  uv_close((uv_handle_t *)&w->poll, wait_closed);
  io_finish(&r->base, err);
}

static void on_ready(uv_poll_t *p, int status, int events)
{
  (void)events; (void)status; /* ready, hung up or failed: the read or write says which */
  wait_end(p->data, 0);
}

static void stop_waits(void *loop)
{
  (void)loop;
  while (all_waits)
    wait_end(all_waits, -ECANCELED);
}

static pthread_once_t waits_registered = PTHREAD_ONCE_INIT;
static void register_waits_stop(void) { sm_io_on_stop(stop_waits); }

static void wait_on_loop(io_req_t *req, void *loop)
{
  fs_req_t *r = (fs_req_t *)req;
  fs_wait_t *w = calloc(1, sizeof *w);
  if (!w) {
    io_finish(req, -ENOMEM);
    return;
  }
  struct epoll_event ev = {.events = r->flags == FS_WAIT_WRITE ? EPOLLOUT : EPOLLIN};
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  int rc = w->epfd < 0 ? -errno : 0;
  if (!rc && epoll_ctl(w->epfd, EPOLL_CTL_ADD, r->fd, &ev) != 0) /* a regular file: EPERM */
    rc = -errno;
  if (!rc)
    rc = uv_poll_init(loop, &w->poll, w->epfd); /* readable once r->fd is ready (or hung up) */
  if (rc < 0) {
    if (w->epfd >= 0)
      close(w->epfd);
    free(w);
    io_finish(req, rc);
    return;
  }
  w->poll.data = w;
  w->req = r;
  if ((rc = uv_poll_start(&w->poll, UV_READABLE, on_ready)) < 0) {
    uv_close((uv_handle_t *)&w->poll, wait_closed);
    io_finish(req, rc);
    return;
  }
  w->next = all_waits;
  if (all_waits)
    all_waits->prev = w;
  all_waits = w;
  r->base.uv = w;
}

/* Timed out: nothing was read or written. */
static void wait_cancel(io_req_t *req)
{
  fs_wait_t *w = req->uv;
  if (w)
    wait_end(w, -ETIMEDOUT);
}

fs_req_t *sm_fs_wait_new(int for_what)
{
  pthread_once(&waits_registered, register_waits_stop);
  fs_req_t *r = (fs_req_t *)sm_io_req_new_loop(sizeof *r, wait_on_loop, wait_cancel, fs_free);
  if (r) {
    r->op = FS_WAIT;
    r->flags = for_what;
    r->fd = -1;
    r->offset = -1;
  }
  return r;
}

int sm_fs_req_own_fd(fs_req_t *r, int fd)
{
  int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0)
    return -errno;
  r->fd = dup;
  r->fd_owned = 1;
  return 0;
}

void sm_fs_post_close(int fd)
{
  fs_req_t *r = sm_fs_req_new(FS_CLOSE);
  if (!r) {
    close(fd);
    return;
  }
  r->fd = fd;
  r->fd_owned = 1; /* the request closes it, even when it is dropped unrun (no IO thread) */
  sm_io_post(&r->base);
}

const char *sm_fs_type_name(mode_t m)
{
  return S_ISREG(m) ? "file" : S_ISDIR(m) ? "directory" : S_ISLNK(m) ? "link"
       : S_ISFIFO(m) ? "fifo" : S_ISSOCK(m) ? "socket" : S_ISCHR(m) ? "char"
       : S_ISBLK(m) ? "block" : "unknown";
}
