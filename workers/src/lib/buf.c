/*
 * buf.c
 *		Growable byte buffer and allocation helpers.
 */
#include "payflow/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
out_of_memory(size_t size)
{
	/* No logging machinery here: it may need memory itself. */
	fprintf(stderr, "{\"level\":\"error\",\"msg\":\"out of memory allocating %zu bytes\"}\n", size);
	abort();
}

void *
pf_malloc(size_t size)
{
	void	   *p = malloc(size ? size : 1);

	if (p == NULL)
		out_of_memory(size);
	return p;
}

void *
pf_calloc(size_t n, size_t size)
{
	void	   *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		out_of_memory(n * size);
	return p;
}

void *
pf_realloc(void *ptr, size_t size)
{
	void	   *p = realloc(ptr, size ? size : 1);

	if (p == NULL)
		out_of_memory(size);
	return p;
}

char *
pf_strdup(const char *s)
{
	return pf_strndup(s, strlen(s));
}

char *
pf_strndup(const char *s, size_t n)
{
	char	   *p = pf_malloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

void
pf_buf_init(pf_buf *buf)
{
	buf->data = NULL;
	buf->len = 0;
	buf->cap = 0;
}

void
pf_buf_free(pf_buf *buf)
{
	free(buf->data);
	pf_buf_init(buf);
}

void
pf_buf_reset(pf_buf *buf)
{
	buf->len = 0;
	if (buf->data)
		buf->data[0] = '\0';
}

void
pf_buf_reserve(pf_buf *buf, size_t extra)
{
	size_t		need = buf->len + extra + 1;
	size_t		cap;

	if (need <= buf->cap)
		return;
	cap = buf->cap ? buf->cap : 64;
	while (cap < need)
		cap *= 2;
	buf->data = pf_realloc(buf->data, cap);
	buf->cap = cap;
}

void
pf_buf_append(pf_buf *buf, const void *data, size_t len)
{
	pf_buf_reserve(buf, len);
	if (len > 0)
		memcpy(buf->data + buf->len, data, len);
	buf->len += len;
	buf->data[buf->len] = '\0';
}

void
pf_buf_append_str(pf_buf *buf, const char *str)
{
	pf_buf_append(buf, str, strlen(str));
}

void
pf_buf_append_char(pf_buf *buf, char c)
{
	pf_buf_append(buf, &c, 1);
}

void
pf_buf_vappendf(pf_buf *buf, const char *fmt, va_list ap)
{
	va_list		ap2;
	char		probe[1];
	int			n;

	if (fmt == NULL)
		return;
	/* measure first, then format into place */
	va_copy(ap2, ap);
	n = vsnprintf(probe, sizeof(probe), fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return;
	pf_buf_reserve(buf, (size_t) n);
	vsnprintf(buf->data + buf->len, (size_t) n + 1, fmt, ap);
	buf->len += (size_t) n;
}

void
pf_buf_appendf(pf_buf *buf, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	pf_buf_vappendf(buf, fmt, ap);
	va_end(ap);
}

const char *
pf_buf_str(const pf_buf *buf)
{
	return buf->data ? buf->data : "";
}

char *
pf_buf_steal(pf_buf *buf)
{
	char	   *s = buf->data ? buf->data : pf_strdup("");

	pf_buf_init(buf);
	return s;
}
