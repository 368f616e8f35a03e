/*
 * s3.c
 *		S3 objects with end-to-end SHA-256 checks.
 */
#include "payflow/s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "payflow/digest.h"
#include "payflow/payload_ref.h"
#include "payflow/sigv4.h"

struct pf_s3
{
	pf_aws_client *aws;
	char	   *scheme;
	char	   *host;			/* with ":port" when the endpoint has one */
	char	   *base_path;		/* endpoint path prefix, "" or "/prefix" */
	bool		path_style;
};

pf_s3 *
pf_s3_create(pf_aws_client *aws, const pf_config *cfg)
{
	pf_s3	   *s3 = pf_calloc(1, sizeof(*s3));
	const char *endpoint = cfg->aws_endpoint_url_s3 ? cfg->aws_endpoint_url_s3 : cfg->aws_endpoint_url;
	pf_buf		url = PF_BUF_INIT;
	CURLU	   *u = curl_url();
	char	   *scheme = NULL,
			   *host = NULL,
			   *port = NULL,
			   *path = NULL;

	if (endpoint)
		pf_buf_append_str(&url, endpoint);
	else
		pf_buf_appendf(&url, "https://s3.%s.amazonaws.com", pf_aws_client_region(aws));
	curl_url_set(u, CURLUPART_URL, url.data, 0);
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	curl_url_get(u, CURLUPART_HOST, &host, 0);
	curl_url_get(u, CURLUPART_PORT, &port, 0);
	curl_url_get(u, CURLUPART_PATH, &path, 0);

	s3->aws = aws;
	s3->scheme = pf_strdup(scheme ? scheme : "https");
	{
		pf_buf		h = PF_BUF_INIT;

		pf_buf_appendf(&h, "%s%s%s", host ? host : "localhost", port ? ":" : "", port ? port : "");
		s3->host = pf_buf_steal(&h);
	}
	s3->base_path = pf_strdup(path && strcmp(path, "/") != 0 ? path : "");
	{
		size_t		l = strlen(s3->base_path);

		while (l > 0 && s3->base_path[l - 1] == '/')
			s3->base_path[--l] = '\0';
	}
	if (cfg->s3_addressing == PF_S3_ADDRESSING_PATH)
		s3->path_style = true;
	else if (cfg->s3_addressing == PF_S3_ADDRESSING_VIRTUAL)
		s3->path_style = false;
	else
		s3->path_style = endpoint != NULL;	/* emulators rarely have wildcard DNS */

	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_url_cleanup(u);
	pf_buf_free(&url);
	return s3;
}

void
pf_s3_destroy(pf_s3 *s3)
{
	if (s3 == NULL)
		return;
	free(s3->scheme);
	free(s3->host);
	free(s3->base_path);
	free(s3);
}

static char *
bucket_url(const pf_s3 *s3, const char *bucket, const char *encoded_key, const char *query)
{
	pf_buf		url = PF_BUF_INIT;

	if (s3->path_style)
		pf_buf_appendf(&url, "%s://%s%s/%s", s3->scheme, s3->host, s3->base_path, bucket);
	else
		pf_buf_appendf(&url, "%s://%s.%s%s", s3->scheme, bucket, s3->host, s3->base_path);
	if (encoded_key)
		pf_buf_appendf(&url, "/%s", encoded_key);
	else if (!s3->path_style)
		pf_buf_append_char(&url, '/');
	if (query)
		pf_buf_appendf(&url, "?%s", query);
	return pf_buf_steal(&url);
}

char *
pf_s3_object_url(const pf_s3 *s3, const char *bucket, const char *key)
{
	pf_buf		k = PF_BUF_INIT;
	char	   *url;

	/* S3 keys are encoded once, '/' kept, exactly as they are signed */
	pf_uri_encode(&k, key, strlen(key), true);
	url = bucket_url(s3, bucket, pf_buf_str(&k), NULL);
	pf_buf_free(&k);
	return url;
}

/* The text of the first <tag>…</tag> in xml, or false. */
static bool
xml_text(const char *xml, const char *tag, char *out, size_t outlen)
{
	char		open[64],
				close[64];
	const char *a,
			   *b;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(xml, open);
	if (a == NULL)
		return false;
	a += strlen(open);
	b = strstr(a, close);
	if (b == NULL)
		return false;
	snprintf(out, outlen, "%.*s", (int) (b - a), a);
	return true;
}

void
pf_s3_parse_error(long status, const char *body, pf_error *err)
{
	char		code[64] = "";
	char		message[400] = "";

	if (body == NULL || !xml_text(body, "Code", code, sizeof(code)))
		snprintf(code, sizeof(code), "%s", status == 404 ? "NotFound" : status == 403 ? "Forbidden" : "");
	if (code[0] == '\0')
		snprintf(code, sizeof(code), "HTTP%ld", status);
	if (body)
		xml_text(body, "Message", message, sizeof(message));
	pf_error_set(err, PF_ERR_FINAL, code, "%s", message);
	err->http_status = status;
	if (status == 404 || strcmp(code, "NoSuchKey") == 0 || strcmp(code, "NoSuchBucket") == 0)
		err->result = PF_ERR_NOT_FOUND;
}

static void
parse_call_error(pf_aws_call *call)
{
	pf_s3_parse_error(call->http.status, pf_buf_str(&call->http.response), &call->error);
}

static void
init_call(pf_aws_call *call, const char *method, const char *url, const void *body, size_t len)
{
	pf_aws_call_init(call, "s3", method, url, body, len);
	call->parse_error = parse_call_error;
}

pf_result
pf_s3_put_object(pf_s3 *s3, const char *bucket, const char *key, const void *data, size_t len,
				 const char *content_type, pf_error *err)
{
	unsigned char digest[PF_SHA256_LEN];
	char	   *b64;
	char	   *url = pf_s3_object_url(s3, bucket, key);
	pf_aws_call call;
	pf_result	r;

	pf_sha256(data, len, digest);
	b64 = pf_base64_encode(digest, sizeof(digest));

	init_call(&call, "PUT", url, data, len);
	pf_aws_call_add_header(&call, "Content-Type", content_type ? content_type : "application/octet-stream");
	/*
	 * S3 checks the body against it; only who may read the object can read
	 * it back. (No x-amz-meta-sha256 any more: an unkeyed hash of a request
	 * in the object's metadata; the one of older objects is still compared.)
	 */
	pf_aws_call_add_header(&call, "x-amz-checksum-sha256", b64);
	r = pf_aws_perform(s3->aws, &call);
	if (r != PF_OK && err)
		*err = call.error;
	pf_aws_call_free(&call);
	free(b64);
	free(url);
	return r;
}

static pf_result
checksum_mismatch(pf_error *err, const char *bucket, const char *key, const char *what)
{
	return pf_error_set(err, PF_ERR_CHECKSUM, "PF005", "checksum mismatch: s3://%s/%s does not match %s",
						bucket, key, what);
}

pf_result
pf_s3_get_object(pf_s3 *s3, const char *bucket, const char *key, const char *expected_checksum,
				 const pf_checksum_key *mac, pf_buf *out, pf_error *err)
{
	char	   *url = pf_s3_object_url(s3, bucket, key);
	pf_aws_call call;
	pf_result	r;

	pf_buf_reset(out);
	if (expected_checksum && !pf_checksum_parse(expected_checksum, NULL))
	{
		free(url);
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "expected checksum is not hmac-sha256:<hex> or sha256:<hex>");
	}
	init_call(&call, "GET", url, NULL, 0);
	/* ask S3 to return the checksum it stored, to compare as well */
	pf_aws_call_add_header(&call, "x-amz-checksum-mode", "ENABLED");
	r = pf_aws_perform(s3->aws, &call);
	if (r != PF_OK)
	{
		if (err)
			*err = call.error;
	}
	else
	{
		pf_buf	   *body = &call.http.response;
		unsigned char digest[PF_SHA256_LEN];
		char		hex[PF_SHA256_HEX_LEN + 1];
		char		header[256];

		pf_sha256(body->data ? body->data : "", body->len, digest);
		pf_hex_encode(digest, sizeof(digest), hex);
		if (expected_checksum && !pf_checksum_verify(mac, body->data ? body->data : "", body->len, expected_checksum))
			r = checksum_mismatch(err, bucket, key, "the reference's checksum");
		else if (pf_http_response_header(&call.http, "x-amz-meta-sha256", header, sizeof(header)) &&
				 strcasecmp(header, hex) != 0)
			r = checksum_mismatch(err, bucket, key, "its x-amz-meta-sha256");
		/* a multipart object's checksum is of its parts ("…-N"): not comparable */
		else if (pf_http_response_header(&call.http, "x-amz-checksum-sha256", header, sizeof(header)) &&
				 strchr(header, '-') == NULL)
		{
			char	   *b64 = pf_base64_encode(digest, sizeof(digest));

			if (strcmp(header, b64) != 0)
				r = checksum_mismatch(err, bucket, key, "its x-amz-checksum-sha256");
			free(b64);
		}
		if (r == PF_OK)
		{
			/* hand over the bytes without another copy */
			pf_buf_free(out);
			*out = *body;
			pf_buf_init(body);
		}
	}
	pf_aws_call_free(&call);
	free(url);
	return r;
}

static void
xml_escape(pf_buf *out, const char *s)
{
	for (; *s; s++)
	{
		switch (*s)
		{
			case '<':
				pf_buf_append_str(out, "&lt;");
				break;
			case '>':
				pf_buf_append_str(out, "&gt;");
				break;
			case '&':
				pf_buf_append_str(out, "&amp;");
				break;
			case '"':
				pf_buf_append_str(out, "&quot;");
				break;
			case '\'':
				pf_buf_append_str(out, "&apos;");
				break;
			default:
				pf_buf_append_char(out, *s);
		}
	}
}

/* The text of the first <tag>…</tag> between from and to, unescaped; or NULL. */
static char *
xml_text_between(const char *from, const char *to, const char *tag)
{
	char		open[64],
				close[64];
	const char *a,
			   *b;
	pf_buf		out = PF_BUF_INIT;
	static const char *const entities[][2] = {{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"},
	{"&quot;", "\""}, {"&apos;", "'"}};

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(from, open);
	if (a == NULL || a >= to)
		return NULL;
	a += strlen(open);
	b = strstr(a, close);
	if (b == NULL || b > to)
		return NULL;
	while (a < b)
	{
		size_t		i;

		for (i = 0; i < sizeof(entities) / sizeof(entities[0]); i++)
			if (strncmp(a, entities[i][0], strlen(entities[i][0])) == 0)
				break;
		if (i < sizeof(entities) / sizeof(entities[0]))
		{
			pf_buf_append_str(&out, entities[i][1]);
			a += strlen(entities[i][0]);
		}
		else
			pf_buf_append_char(&out, *a++);
	}
	return pf_buf_steal(&out);
}

/* "2026-12-06T04:59:40.000Z" as Unix seconds; 0 when unreadable. */
static int64_t
parse_iso_time(const char *text)
{
	struct tm	tm;

	memset(&tm, 0, sizeof(tm));
	if (text == NULL || sscanf(text, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
							   &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t) timegm(&tm);
}

void
pf_s3_listing_free(pf_s3_listing *listing)
{
	for (int i = 0; i < listing->n; i++)
		free(listing->keys[i]);
	free(listing->keys);
	free(listing->last_modified);
	free(listing->next_token);
	memset(listing, 0, sizeof(*listing));
}

pf_result
pf_s3_list_objects(pf_s3 *s3, const char *bucket, const char *prefix, const char *token, int max_keys,
				   pf_s3_listing *out, pf_error *err)
{
	pf_buf		query = PF_BUF_INIT;
	char	   *url;
	pf_aws_call call;
	pf_result	r;

	pf_s3_listing_free(out);
	if (max_keys < 1 || max_keys > PF_S3_MAX_LIST)
		return pf_error_set(err, PF_ERR_INVALID, "InvalidInput", "ListObjectsV2 takes 1 to %d keys a page",
							PF_S3_MAX_LIST);
	/* in the canonical order, each value encoded once */
	if (token)
	{
		pf_buf_append_str(&query, "continuation-token=");
		pf_uri_encode(&query, token, strlen(token), false);
		pf_buf_append_char(&query, '&');
	}
	pf_buf_appendf(&query, "list-type=2&max-keys=%d&prefix=", max_keys);
	pf_uri_encode(&query, prefix ? prefix : "", prefix ? strlen(prefix) : 0, false);
	url = bucket_url(s3, bucket, NULL, pf_buf_str(&query));
	init_call(&call, "GET", url, NULL, 0);
	r = pf_aws_perform(s3->aws, &call);
	if (r != PF_OK)
	{
		if (err)
			*err = call.error;
	}
	else
	{
		const char *body = pf_buf_str(&call.http.response);
		const char *end = body + strlen(body);
		const char *p = body;
		int			room = 0;
		char	   *truncated;

		while ((p = strstr(p, "<Contents>")) != NULL)
		{
			const char *close = strstr(p, "</Contents>");
			char	   *key;

			if (close == NULL)
				break;
			key = xml_text_between(p, close, "Key");
			if (key != NULL)
			{
				char	   *modified = xml_text_between(p, close, "LastModified");

				if (out->n == room)
				{
					room = room ? 2 * room : 64;
					out->keys = pf_realloc(out->keys, room * sizeof(char *));
					out->last_modified = pf_realloc(out->last_modified, room * sizeof(int64_t));
				}
				out->keys[out->n] = key;
				out->last_modified[out->n] = parse_iso_time(modified);
				out->n++;
				free(modified);
			}
			p = close;
		}
		truncated = xml_text_between(body, end, "IsTruncated");
		if (truncated && strcmp(truncated, "true") == 0)
		{
			out->next_token = xml_text_between(body, end, "NextContinuationToken");
			if (out->next_token == NULL)
				r = pf_error_set(err, PF_ERR_TRANSIENT, "InvalidResponse",
								 "a truncated listing without NextContinuationToken");
		}
		free(truncated);
	}
	pf_aws_call_free(&call);
	pf_buf_free(&query);
	free(url);
	return r;
}

pf_result
pf_s3_delete_objects(pf_s3 *s3, const char *bucket, const char *const *keys, int n, int *n_failed,
					 pf_error *err)
{
	pf_buf		xml = PF_BUF_INIT;
	unsigned char md5[PF_MD5_LEN];
	char	   *md5_b64;
	char	   *url;
	pf_aws_call call;
	pf_result	r;

	if (n_failed)
		*n_failed = 0;
	if (n < 1 || n > PF_S3_MAX_DELETE)
		return pf_error_set(err, PF_ERR_INVALID, "InvalidInput", "DeleteObjects takes 1 to %d keys", PF_S3_MAX_DELETE);
	pf_buf_append_str(&xml, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
					  "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>");
	for (int i = 0; i < n; i++)
	{
		pf_buf_append_str(&xml, "<Object><Key>");
		xml_escape(&xml, keys[i]);
		pf_buf_append_str(&xml, "</Key></Object>");
	}
	pf_buf_append_str(&xml, "</Delete>");

	/* S3 refuses a multi-object delete without a body digest */
	pf_md5(xml.data, xml.len, md5);
	md5_b64 = pf_base64_encode(md5, sizeof(md5));
	url = bucket_url(s3, bucket, NULL, "delete");
	init_call(&call, "POST", url, xml.data, xml.len);
	pf_aws_call_add_header(&call, "Content-Type", "application/xml");
	pf_aws_call_add_header(&call, "Content-MD5", md5_b64);
	r = pf_aws_perform(s3->aws, &call);
	if (r != PF_OK)
	{
		if (err)
			*err = call.error;
	}
	else
	{
		/* quiet mode lists only the keys that could not be deleted */
		const char *p = pf_buf_str(&call.http.response);
		int			failed = 0;

		while ((p = strstr(p, "<Error>")) != NULL)
		{
			if (failed == 0 && err)
			{
				char		code[64] = "";
				char		key[256] = "";

				xml_text(p, "Code", code, sizeof(code));
				xml_text(p, "Key", key, sizeof(key));
				pf_error_set(err, PF_ERR_FINAL, code, "could not delete %s", key);
			}
			failed++;
			p += 7;
		}
		if (n_failed)
			*n_failed = failed;
	}
	pf_aws_call_free(&call);
	pf_buf_free(&xml);
	free(md5_b64);
	free(url);
	return r;
}
