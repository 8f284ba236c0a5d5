/*
** File-system work on libuv's pool: the blocking system calls behind smarm.fs (src/lua/lfs.c),
** each run by a pool thread so that a slow disk, a FIFO or a terminal parks only the actor that
** asked. A request carries copies of its arguments (paths, bytes: the caller's own may be gone
** before the work runs) and its results; the work touches neither Lua nor the runtime.
**
** A read's wait for data, and a write's wait for room, can be done first on the IO thread
** (FS_WAIT), so that a read of a FIFO or terminal that timed out took nothing from it and a write
** that timed out wrote a known part.
**
** Descriptors: an open file's descriptor belongs to whoever holds the file (the Lua handle); a
** read or write names it, and its owner keeps it open until the request is done. Reads and
** writes that fail with EINTR retry, except while the IO layer stops (sm_io_interrupted): then
** the call gives up, so a read of a terminal cannot keep smarm.run waiting.
*/
#ifndef SMARM_IO_FS_H
#define SMARM_IO_FS_H

#include "io.h"

#include <stddef.h>
#include <sys/stat.h>

enum fs_op {
  FS_READFILE,  /* path -> data, len: the whole file */
  FS_WRITEFILE, /* path, data, len, mode: replaces the file */
  FS_STAT,      /* path -> st */
  FS_UNLINK,    /* path */
  FS_RENAME,    /* path -> path2 */
  FS_MKDIR,     /* path, mode */
  FS_RMDIR,     /* path */
  FS_SCANDIR,   /* path -> entries, count (sorted by name, without . and ..) */
  FS_OPEN,      /* path, flags, mode -> fd */
  FS_READ,      /* fd, len, offset -> data, len: up to len bytes (0 at the end) */
  FS_WRITE,     /* fd, data, len, offset -> len: the bytes written (all, unless it failed) */
  FS_CLOSE,     /* fd (fd_owned: closed by the work, or when freed if the work never ran) */
  FS_WAIT,      /* fd, flags (FS_WAIT_READ or _WRITE): until it can be read or written (on the
                   IO thread: sm_fs_wait_new) */
};

typedef struct fs_entry {
  char *name;
  mode_t type; /* its type bits (S_IFREG, ...; 0 when the file system does not say) */
} fs_entry_t;

typedef struct fs_req {
  io_req_t base;
  enum fs_op op;
  char *path, *path2;  /* owned */
  char *data;          /* owned: writefile, write: the bytes to write; readfile, read: the bytes read */
  size_t len;
  int mode;
  struct stat st;
  fs_entry_t *entries; /* owned: scandir */
  size_t count;
  int fd, flags;       /* open (result fd), read, write, close */
  int fd_owned;        /* read, write: fd is the request's own duplicate (sm_fs_req_own_fd),
                          closed when the request is freed, after its work has run; close: the
                          descriptor to close, closed once whether or not the work ran */
  double offset;       /* read, write: where (negative: the file's position) */
} fs_req_t;

/* A request for op (fd -1, offset -1, the rest zeroed) that runs on the pool, or NULL. */
fs_req_t *sm_fs_req_new(enum fs_op op);

/* A request that completes once fd (its own duplicate: sm_fs_req_own_fd) can be read (for_what
** FS_WAIT_READ) or written (FS_WAIT_WRITE) without blocking, or at its end (a hang-up, an
** error); it runs on the IO thread (libuv's poll), so it can time out (sm_io_call_timeout) with
** nothing done to the file. A regular file cannot be waited for: -EPERM (its reads and writes
** never wait). The IO thread's stop ends it with -ECANCELED. */
enum { FS_WAIT_READ = 1, FS_WAIT_WRITE = 2 };
fs_req_t *sm_fs_wait_new(int for_what);

/* Gives a read or write request its own duplicate of fd (close-on-exec), so that the file may be
** closed, and its number reused, while the request waits in the pool or runs: the work uses the
** duplicate, and the request closes it when freed. Returns 0 or a negative errno (EMFILE). */
int sm_fs_req_own_fd(fs_req_t *r, int fd);

/* Closes fd without waiting, on the pool, from any thread (also inside __gc); here, at once, when
** there is no IO thread to post it to (the runtime has ended) or no memory for the request. */
void sm_fs_post_close(int fd);

/* A name for a file type: "file", "directory", "link", "fifo", "socket", "char", "block" or
** "unknown". */
const char *sm_fs_type_name(mode_t mode);

#endif
