/*
 * sigv4.c
 *		AWS Signature Version 4: canonical request, string to sign, signing
 *		key and Authorization header.
 */
#include "payflow/sigv4.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/digest.h"

void
pf_sigv4_amz_date(time_t t, char out[PF_AMZ_DATE_LEN + 1])
{
	struct tm	tm;

	gmtime_r(&t, &tm);
	strftime(out, PF_AMZ_DATE_LEN + 1, "%Y%m%dT%H%M%SZ", &tm);
}

static bool
unreserved(unsigned char c)
{
	/* ASCII ranges spelled out: isalnum() would follow the locale */
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		c == '-' || c == '_' || c == '.' || c == '~';
}

void
pf_uri_encode(pf_buf *out, const char *text, size_t len, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";

	pf_buf_reserve(out, len);
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) text[i];

		if (unreserved(c) || (keep_slash && c == '/'))
			pf_buf_append_char(out, (char) c);
		else
		{
			char		esc[3] = {'%', hex[c >> 4], hex[c & 0xF]};

			pf_buf_append(out, esc, 3);
		}
	}
}

void
pf_uri_decode(pf_buf *out, const char *text, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		if (text[i] == '%' && i + 2 < len && isxdigit((unsigned char) text[i + 1]) &&
			isxdigit((unsigned char) text[i + 2]))
		{
			char		pair[3] = {text[i + 1], text[i + 2], '\0'};

			pf_buf_append_char(out, (char) strtol(pair, NULL, 16));
			i += 2;
		}
		else
			pf_buf_append_char(out, text[i]);
	}
}

/*
 * Remove empty, "." and ".." segments the way AWS SDKs do for non-S3
 * services: "//example//" -> "/example/", "/a/b/../.." -> "/".
 */
static void
normalize_path(pf_buf *out, const char *path)
{
	size_t		len = strlen(path);
	const char **segs = pf_calloc(len + 1, sizeof(char *));
	size_t	   *lens = pf_calloc(len + 1, sizeof(size_t));
	size_t		n = 0;
	const char *p = path;

	while (*p)
	{
		const char *slash = strchr(p, '/');
		size_t		l = slash ? (size_t) (slash - p) : strlen(p);

		if (l == 0 || (l == 1 && p[0] == '.'))
			;					/* skip */
		else if (l == 2 && p[0] == '.' && p[1] == '.')
		{
			if (n > 0)
				n--;
		}
		else
		{
			segs[n] = p;
			lens[n] = l;
			n++;
		}
		if (!slash)
			break;
		p = slash + 1;
	}

	if (path[0] == '/')
		pf_buf_append_char(out, '/');
	for (size_t i = 0; i < n; i++)
	{
		if (i > 0)
			pf_buf_append_char(out, '/');
		pf_buf_append(out, segs[i], lens[i]);
	}
	if (n > 0 && len > 0 && path[len - 1] == '/')
		pf_buf_append_char(out, '/');
	if (out->len == 0)
		pf_buf_append_char(out, '/');
	free(segs);
	free(lens);
}

static void
canonical_uri(pf_buf *out, const char *path, bool s3)
{
	pf_buf		tmp = PF_BUF_INIT;

	if (path == NULL || path[0] == '\0')
	{
		pf_buf_append_char(out, '/');
		return;
	}
	if (s3)
	{
		/* decode first so an already-encoded key is not encoded twice */
		pf_uri_decode(&tmp, path, strlen(path));
		pf_uri_encode(out, tmp.data, tmp.len, true);
	}
	else
	{
		/* the wire path is encoded again, so "%20" becomes "%2520" */
		normalize_path(&tmp, path);
		pf_uri_encode(out, tmp.data, tmp.len, true);
	}
	pf_buf_free(&tmp);
}

typedef struct query_param
{
	char	   *key;			/* encoded */
	char	   *value;			/* encoded */
} query_param;

static int
compare_params(const void *a, const void *b)
{
	const query_param *pa = a;
	const query_param *pb = b;
	int			c = strcmp(pa->key, pb->key);

	return c != 0 ? c : strcmp(pa->value, pb->value);
}

static char *
reencode(const char *text, size_t len)
{
	pf_buf		decoded = PF_BUF_INIT;
	pf_buf		encoded = PF_BUF_INIT;

	pf_uri_decode(&decoded, text, len);
	pf_uri_encode(&encoded, pf_buf_str(&decoded), decoded.len, false);
	pf_buf_free(&decoded);
	return pf_buf_steal(&encoded);
}

static void
canonical_query(pf_buf *out, const char *query)
{
	size_t		len = query ? strlen(query) : 0;
	query_param *params;
	size_t		n = 0;
	const char *p = query;

	if (len == 0)
		return;
	params = pf_calloc(len / 2 + 2, sizeof(query_param));
	while (p && *p)
	{
		const char *amp = strchr(p, '&');
		size_t		l = amp ? (size_t) (amp - p) : strlen(p);

		if (l > 0)
		{
			const char *eq = memchr(p, '=', l);
			size_t		klen = eq ? (size_t) (eq - p) : l;

			params[n].key = reencode(p, klen);
			params[n].value = eq ? reencode(eq + 1, l - klen - 1) : pf_strdup("");
			n++;
		}
		p = amp ? amp + 1 : NULL;
	}
	qsort(params, n, sizeof(query_param), compare_params);
	for (size_t i = 0; i < n; i++)
	{
		pf_buf_appendf(out, "%s%s=%s", i ? "&" : "", params[i].key, params[i].value);
		free(params[i].key);
		free(params[i].value);
	}
	free(params);
}

typedef struct canonical_header
{
	char	   *name;			/* lower case */
	pf_buf		value;			/* values of every header of this name, by ',' */
} canonical_header;

static int
compare_headers(const void *a, const void *b)
{
	return strcmp(((const canonical_header *) a)->name, ((const canonical_header *) b)->name);
}

/* Trim and fold runs of blanks to one space, as the spec requires. */
static void
append_trimmed(pf_buf *out, const char *value)
{
	const char *p = value;
	bool		pending_space = false;

	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	for (; *p; p++)
	{
		if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
			pending_space = true;
		else
		{
			if (pending_space)
				pf_buf_append_char(out, ' ');
			pending_space = false;
			pf_buf_append_char(out, *p);
		}
	}
}

pf_result
pf_sigv4_sign(const pf_sigv4_request *req, const pf_sigv4_scope *scope,
			  pf_sigv4_result *out, pf_error *err)
{
	canonical_header *hdrs;
	size_t		n = 0;
	pf_buf		creq = PF_BUF_INIT;
	pf_buf		signed_names = PF_BUF_INIT;
	pf_buf		sts = PF_BUF_INIT;
	pf_buf		key = PF_BUF_INIT;
	char		creq_hash[PF_SHA256_HEX_LEN + 1];
	char		date[9];
	unsigned char k[PF_SHA256_LEN];
	unsigned char k2[PF_SHA256_LEN];
	unsigned char sig[PF_SHA256_LEN];

	memset(out, 0, sizeof(*out));
	if (scope->amz_date == NULL || strlen(scope->amz_date) != PF_AMZ_DATE_LEN)
		return pf_error_set(err, PF_ERR_INVALID, "sigv4", "X-Amz-Date must look like 20150830T123600Z");
	memcpy(date, scope->amz_date, 8);
	date[8] = '\0';

	/* headers: lower-case names, merged duplicates, sorted by name */
	hdrs = pf_calloc(req->n_headers + 1, sizeof(canonical_header));
	for (size_t i = 0; i < req->n_headers; i++)
	{
		pf_buf		name = PF_BUF_INIT;
		size_t		j;
		const char *nm = req->headers[i].name;

		while (*nm == ' ' || *nm == '\t')
			nm++;
		for (const char *c = nm; *c && *c != ' ' && *c != '\t'; c++)
			pf_buf_append_char(&name, (char) tolower((unsigned char) *c));
		if (name.len == 0 || strcmp(name.data, "authorization") == 0)
		{
			pf_buf_free(&name);
			continue;
		}
		for (j = 0; j < n; j++)
			if (strcmp(hdrs[j].name, name.data) == 0)
				break;
		if (j == n)
		{
			hdrs[n].name = pf_buf_steal(&name);
			pf_buf_init(&hdrs[n].value);
			n++;
		}
		else
		{
			pf_buf_free(&name);
			pf_buf_append_char(&hdrs[j].value, ',');
		}
		append_trimmed(&hdrs[j].value, req->headers[i].value ? req->headers[i].value : "");
	}
	qsort(hdrs, n, sizeof(canonical_header), compare_headers);

	pf_buf_appendf(&creq, "%s\n", req->method);
	canonical_uri(&creq, req->path, req->s3);
	pf_buf_append_char(&creq, '\n');
	canonical_query(&creq, req->query);
	pf_buf_append_char(&creq, '\n');
	for (size_t i = 0; i < n; i++)
	{
		pf_buf_appendf(&creq, "%s:%s\n", hdrs[i].name, pf_buf_str(&hdrs[i].value));
		pf_buf_appendf(&signed_names, "%s%s", i ? ";" : "", hdrs[i].name);
		free(hdrs[i].name);
		pf_buf_free(&hdrs[i].value);
	}
	free(hdrs);
	pf_buf_appendf(&creq, "\n%s\n%s", pf_buf_str(&signed_names),
				   req->payload_hash ? req->payload_hash : PF_SIGV4_UNSIGNED_PAYLOAD);

	pf_sha256_hex(creq.data, creq.len, creq_hash);
	pf_buf_appendf(&sts, "%s\n%s\n%s/%s/%s/aws4_request\n%s", PF_SIGV4_ALGORITHM,
				   scope->amz_date, date, scope->region, scope->service, creq_hash);

	/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request") */
	pf_buf_appendf(&key, "AWS4%s", scope->secret_access_key);
	pf_hmac_sha256(key.data, key.len, date, strlen(date), k);
	pf_buf_free(&key);
	pf_hmac_sha256(k, sizeof(k), scope->region, strlen(scope->region), k2);
	pf_hmac_sha256(k2, sizeof(k2), scope->service, strlen(scope->service), k);
	pf_hmac_sha256(k, sizeof(k), "aws4_request", strlen("aws4_request"), k2);
	pf_hmac_sha256(k2, sizeof(k2), sts.data, sts.len, sig);
	pf_hex_encode(sig, sizeof(sig), out->signature);

	out->canonical_request = pf_buf_steal(&creq);
	out->string_to_sign = pf_buf_steal(&sts);
	out->signed_headers = pf_buf_steal(&signed_names);
	{
		pf_buf		authz = PF_BUF_INIT;

		pf_buf_appendf(&authz, "%s Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, Signature=%s",
					   PF_SIGV4_ALGORITHM, scope->access_key_id, date, scope->region,
					   scope->service, out->signed_headers, out->signature);
		out->authorization = pf_buf_steal(&authz);
	}
	return PF_OK;
}

void
pf_sigv4_result_free(pf_sigv4_result *res)
{
	free(res->canonical_request);
	free(res->string_to_sign);
	free(res->signed_headers);
	free(res->authorization);
	memset(res, 0, sizeof(*res));
}
