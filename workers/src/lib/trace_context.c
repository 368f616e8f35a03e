/*
 * trace_context.c
 *		W3C traceparent: read, start, continue, write (trace_context.h).
 *		The rules are the extension's (extension/sql/trace_context.sql), so
 *		a value one side accepts the other does too.
 */
#include "payflow/trace_context.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "payflow/backoff.h"

static bool
lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool
all_zeros(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != '0')
			return false;
	return true;
}

bool
pf_traceparent_parse(const char *text, pf_trace_context *out)
{
	size_t		len;
	unsigned	flags;

	if (text == NULL)
		return false;
	len = strlen(text);
	/* vv-<32>-<16>-ff: a later version may add fields after a '-' */
	if (len < PF_TRACEPARENT_LEN || len > 512 || !lower_hex(text, 2) || text[2] != '-'
		|| !lower_hex(text + 3, 32) || text[35] != '-' || !lower_hex(text + 36, 16) || text[52] != '-'
		|| !lower_hex(text + 53, 2))
		return false;
	if (strncmp(text, "ff", 2) == 0)
		return false;
	if (strncmp(text, "00", 2) == 0 ? len != PF_TRACEPARENT_LEN : (len > PF_TRACEPARENT_LEN && text[55] != '-'))
		return false;
	if (all_zeros(text + 3, 32) || all_zeros(text + 36, 16))
		return false;
	memcpy(out->trace_id, text + 3, 32);
	out->trace_id[32] = '\0';
	memcpy(out->span_id, text + 36, 16);
	out->span_id[16] = '\0';
	if (sscanf(text + 53, "%2x", &flags) != 1)
		return false;
	out->sampled = (flags & 1) != 0;
	return true;
}

/* n_u64 random 64-bit words as hex digits (and a NUL), never all zeros */
static void
random_hex(char *out, int n_u64)
{
	static const char hex[] = "0123456789abcdef";

	do
	{
		for (int i = 0; i < n_u64; i++)
		{
			uint64_t	r = pf_random_u64();

			for (int d = 15; d >= 0; d--, r >>= 4)
				out[16 * i + d] = hex[r & 15];
		}
		out[16 * n_u64] = '\0';
	} while (all_zeros(out, (size_t) (16 * n_u64)));
}

void
pf_trace_context_start(pf_trace_context *out, bool sampled)
{
	random_hex(out->trace_id, 2);
	random_hex(out->span_id, 1);
	out->sampled = sampled;
}

void
pf_trace_context_child(const pf_trace_context *parent, pf_trace_context *out)
{
	if (out != parent)
		*out = *parent;
	random_hex(out->span_id, 1);
}

void
pf_trace_context_continue(const char *parent_text, pf_trace_context *out)
{
	pf_trace_context parent;

	if (pf_traceparent_parse(parent_text, &parent))
		pf_trace_context_child(&parent, out);
	else
		pf_trace_context_start(out, true);
}

void
pf_traceparent_format(const pf_trace_context *ctx, char *out)
{
	snprintf(out, PF_TRACEPARENT_LEN + 1, "00-%s-%s-%02x", ctx->trace_id, ctx->span_id, ctx->sampled ? 1 : 0);
}
