/*
 * buf.h
 *		A growable byte buffer, always NUL-terminated so text can be used as a
 *		C string without another copy.
 *
 * Allocation failure aborts the process: an edge process that cannot allocate
 * cannot make progress safely, and its supervisor (ECS) restarts it; every
 * message it held comes back after its visibility timeout.
 */
#ifndef PAYFLOW_BUF_H
#define PAYFLOW_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct pf_buf
{
	char	   *data;			/* NULL until something is appended */
	size_t		len;
	size_t		cap;
} pf_buf;

#define PF_BUF_INIT {NULL, 0, 0}

void		pf_buf_init(pf_buf *buf);
void		pf_buf_free(pf_buf *buf);
void		pf_buf_reset(pf_buf *buf);
void		pf_buf_reserve(pf_buf *buf, size_t extra);
void		pf_buf_append(pf_buf *buf, const void *data, size_t len);
void		pf_buf_append_str(pf_buf *buf, const char *str);
void		pf_buf_append_char(pf_buf *buf, char c);
void		pf_buf_appendf(pf_buf *buf, const char *fmt,...) __attribute__((format(printf, 2, 3)));
void		pf_buf_vappendf(pf_buf *buf, const char *fmt, va_list ap);

/* The contents as a string ("" when empty); the buffer keeps ownership. */
const char *pf_buf_str(const pf_buf *buf);

/* Hand the contents to the caller (free() it) and leave the buffer empty. */
char	   *pf_buf_steal(pf_buf *buf);

/* Allocation helpers with the same abort-on-failure rule. */
void	   *pf_malloc(size_t size);
void	   *pf_calloc(size_t n, size_t size);
void	   *pf_realloc(void *ptr, size_t size);
char	   *pf_strdup(const char *s);
char	   *pf_strndup(const char *s, size_t n);

#endif							/* PAYFLOW_BUF_H */
