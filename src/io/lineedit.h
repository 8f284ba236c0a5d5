/*
** The line editor of the prompts (`smarm` alone, `smarm attach`): line editing and history by
** libedit (BSD-licensed), loaded at run time (dlopen of libedit.so.2), so that nothing needs it
** to build and a machine without it reads plain lines.
**
** A read is a request on the IO thread that runs libedit's callback interface on a thread of
** libuv's pool: it waits (poll) for the terminal or a cancel, and feeds libedit a key at a time,
** so that it can be cancelled when the reading actor ends (a Ctrl-C of the prompt kills its
** reader) or the IO thread stops; libedit then puts the terminal back as it found it. Reads run
** one at a time, in the order they came (libedit keeps one state per process).
**
** Owner: the IO thread starts, cancels and completes reads; libedit's state is touched only by
** the pool thread of the read that runs (reads never overlap), and by sm_lineedit_available's
** loading, once (pthread_once).
*/
#ifndef SMARM_IO_LINEEDIT_H
#define SMARM_IO_LINEEDIT_H

#include "io.h"

typedef struct lineedit_req {
  io_req_t base;
  char *prompt; /* owned */
  char *line;   /* owned: the line read, without its newline; NULL at the end of input */
} lineedit_req_t;

/* Whether reads can edit: standard input and output are terminals and libedit loaded. NULL if
** so, else why not ("standard input is not a terminal", "libedit.so.2 cannot be loaded: ...").
** Any thread. SMARM_LINEEDIT=0 in the environment turns it off. */
const char *sm_lineedit_unavailable(void);

/* A read of one line with `prompt` (copied by the caller into prompt), or NULL. Results: err 0
** and line (NULL: the end of input, Ctrl-D on an empty line), -ENOTSUP when unavailable,
** -ECANCELED when the IO thread stopped, -ETIMEDOUT when cancelled. Every line that is not empty
** and not the one before goes to the history. */
lineedit_req_t *sm_lineedit_req_new(void);

#endif
