/*
** MD5 (RFC 1321), for the one thing smarm needs it for: the Erlang distribution's handshake,
** whose challenge digest is md5(cookie ++ the challenge in decimal) (src/io/handshake.c). Not a
** protection of anything by itself. No allocation: any thread.
*/
#ifndef SMARM_UTIL_MD5_H
#define SMARM_UTIL_MD5_H

#include <stddef.h>
#include <stdint.h>

typedef struct md5 {
  uint32_t h[4];
  uint64_t len;            /* bytes taken so far */
  unsigned char block[64]; /* the bytes of the block not yet full */
} md5_t;

void sm_md5_init(md5_t *m);
void sm_md5_update(md5_t *m, const void *p, size_t n);
void sm_md5_final(md5_t *m, unsigned char digest[16]);

#endif
