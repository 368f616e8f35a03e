/*
 * console.c
 *		The operator console's static files under /console/, and the
 *		OpenAPI document at /openapi.json, read from the console folder.
 *
 * The folder is found next to the program: <bin>/../console (the build
 * tree: workers/bin/payflow-api serves workers/console/), else
 * <bin>/../share/payflow/console (an install).  Without one, /console/ and
 * /openapi.json answer 404 with a JSON error saying so; the rest of the
 * API is unaffected.
 *
 * Paths without a file name extension (/console/, /console/operations/<id>)
 * are the one page, index.html, which routes in the browser.  A file name
 * is made of [A-Za-z0-9._-] segments, none starting with a dot, so no
 * path leaves the folder.  Every answer carries a strict
 * Content-Security-Policy: scripts and styles from this origin only, no
 * inline script, no frames, fetch only to this origin; the page holds
 * nothing it could leak to another.
 */
#include "api.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONSOLE_PREFIX "/console/"
#define MAX_FILE_BYTES (8 * 1024 * 1024)

static const char CSP[] =
"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
"font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

static bool
has_index(const char *dir)
{
	char		path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/index.html", dir) >= (int) sizeof(path))
		return false;
	return access(path, R_OK) == 0;
}

char *
api_console_find_dir(void)
{
	char		exe[PATH_MAX];
	ssize_t		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	static const char *const candidates[] = {"../console", "../share/payflow/console"};

	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++)
	{
		char		path[PATH_MAX];
		char		real[PATH_MAX];

		if (snprintf(path, sizeof(path), "%s/%s", exe, candidates[i]) >= (int) sizeof(path))
			continue;
		if (realpath(path, real) != NULL && has_index(real))
			return pf_strdup(real);
	}
	return NULL;
}

static const char *
content_type_of(const char *name)
{
	static const struct
	{
		const char *ext;
		const char *type;
	}			types[] = {
		{".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
		{".css", "text/css; charset=utf-8"}, {".json", "application/json"},
		{".svg", "image/svg+xml"}, {".png", "image/png"}, {".txt", "text/plain; charset=utf-8"},
	};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return NULL;
}

/* Segments of [A-Za-z0-9._-], none empty or starting with '.'. */
static bool
safe_relative(const char *rel)
{
	bool		segment_start = true;

	if (*rel == '\0')
		return false;
	for (const char *p = rel; *p; p++)
	{
		if (*p == '/')
		{
			if (segment_start)
				return false;
			segment_start = true;
			continue;
		}
		if (segment_start && *p == '.')
			return false;
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			  *p == '.' || *p == '_' || *p == '-'))
			return false;
		segment_start = false;
	}
	return !segment_start;
}

static bool
read_file(const char *path, pf_buf *out)
{
	int			fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char		chunk[65536];
	ssize_t		n;

	if (fd < 0)
		return false;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE_BYTES)
	{
		close(fd);
		return false;
	}
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		pf_buf_append(out, chunk, (size_t) n);
	close(fd);
	return n == 0;
}

static enum MHD_Result
serve(api_request *req, const char *rel, bool spa_page)
{
	const char *dir = req->ctx->console_dir;
	char		path[PATH_MAX];
	pf_buf		body = PF_BUF_INIT;
	const char *type = content_type_of(rel);
	struct MHD_Response *resp;
	size_t		len;

	if (dir == NULL)
		return api_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found",
							   "the console's files were not found next to payflow-api (../console or ../share/payflow/console)");
	if (!safe_relative(rel) || type == NULL)
		return api_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no such file");
	if (snprintf(path, sizeof(path), "%s/%s", dir, rel) >= (int) sizeof(path) || !read_file(path, &body))
	{
		pf_buf_free(&body);
		return api_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no such file");
	}
	len = body.len;
	resp = MHD_create_response_from_buffer(len, len ? pf_buf_steal(&body) : (char *) "",
										   len ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(resp, "Content-Security-Policy", CSP);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
	/* the page is small and changes with a deployment: always revalidated */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, spa_page ? "no-store" : "no-cache");
	return api_reply_response(req, MHD_HTTP_OK, resp);
}

enum MHD_Result
api_console(api_request *req)
{
	const char *path = req->path;
	const char *rel;
	const char *last;

	if (strcmp(path, "/openapi.json") == 0)
		return serve(req, "openapi.json", false);
	if (strcmp(path, "/console") == 0)
	{
		const char *headers[] = {MHD_HTTP_HEADER_LOCATION, CONSOLE_PREFIX, NULL};

		return api_reply_json_headers(req, MHD_HTTP_PERMANENT_REDIRECT,
									  json_pack("{s:s}", "location", CONSOLE_PREFIX), headers);
	}
	rel = path + strlen(CONSOLE_PREFIX);
	last = strrchr(rel, '/');
	last = last ? last + 1 : rel;
	if (*rel == '\0' || strchr(last, '.') == NULL)
		return serve(req, "index.html", true);
	return serve(req, rel, false);
}
