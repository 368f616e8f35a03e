/*
 * test_trace_context.c
 *		W3C traceparent: the recommendation's examples, every way to be
 *		wrong, new traces and child spans.
 */
#include <stdio.h>
#include <string.h>

#include "payflow/trace_context.h"
#include "unit.h"

#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define SPAN "00f067aa0ba902b7"

static void
test_parse(void)
{
	pf_trace_context c;
	char		text[PF_TRACEPARENT_LEN + 1];

	CHECK(pf_traceparent_parse("00-" TRACE "-" SPAN "-01", &c));
	CHECK_STR(c.trace_id, TRACE);
	CHECK_STR(c.span_id, SPAN);
	CHECK(c.sampled);
	pf_traceparent_format(&c, text);
	CHECK_STR(text, "00-" TRACE "-" SPAN "-01");

	CHECK(pf_traceparent_parse("00-" TRACE "-" SPAN "-00", &c));
	CHECK(!c.sampled);
	/* other flag bits: only "sampled" is read */
	CHECK(pf_traceparent_parse("00-" TRACE "-" SPAN "-03", &c) && c.sampled);

	/* a later version: its first four fields, written back as 00 */
	CHECK(pf_traceparent_parse("cc-" TRACE "-" SPAN "-01-what-comes-next", &c));
	pf_traceparent_format(&c, text);
	CHECK_STR(text, "00-" TRACE "-" SPAN "-01");
	CHECK(pf_traceparent_parse("cc-" TRACE "-" SPAN "-01", &c));
	CHECK(!pf_traceparent_parse("cc-" TRACE "-" SPAN "-01x", &c));
}

static void
test_invalid(void)
{
	pf_trace_context c;
	const char *bad[] = {
		NULL, "", "00", "not-a-trace",
		"00-" TRACE "-" SPAN "-01-extra",	/* 00 has four fields */
		"ff-" TRACE "-" SPAN "-01", /* version ff */
		"00-00000000000000000000000000000000-" SPAN "-01",
		"00-" TRACE "-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-" SPAN "-01",	/* upper case */
		"00-" TRACE "-" SPAN "-0g",
		"00_" TRACE "-" SPAN "-01",
		"00-" TRACE "-" SPAN "01",
		"00-4bf92f3577b34da6a3ce929d0e0e473-" SPAN "-01",	/* 31 digits */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (!CHECK(!pf_traceparent_parse(bad[i], &c)))
			fprintf(stderr, "  accepted: %s\n", bad[i] ? bad[i] : "(null)");
}

static void
test_start_and_child(void)
{
	pf_trace_context a,
				b,
				child;
	char		text[PF_TRACEPARENT_LEN + 1];

	pf_trace_context_start(&a, true);
	pf_trace_context_start(&b, true);
	CHECK(strlen(a.trace_id) == 32 && strlen(a.span_id) == 16);
	CHECK(strcmp(a.trace_id, b.trace_id) != 0);
	pf_traceparent_format(&a, text);
	CHECK(pf_traceparent_parse(text, &b));
	CHECK_STR(b.trace_id, a.trace_id);

	pf_trace_context_child(&a, &child);
	CHECK_STR(child.trace_id, a.trace_id);
	CHECK(strcmp(child.span_id, a.span_id) != 0);
	CHECK(child.sampled == a.sampled);

	/* continue: under a valid parent, or a new trace for a bad one */
	pf_trace_context_continue("00-" TRACE "-" SPAN "-00", &child);
	CHECK_STR(child.trace_id, TRACE);
	CHECK(strcmp(child.span_id, SPAN) != 0 && !child.sampled);
	pf_trace_context_continue("garbage", &child);
	CHECK(strcmp(child.trace_id, TRACE) != 0 && child.sampled);
	pf_trace_context_continue(NULL, &child);
	CHECK(strlen(child.trace_id) == 32);
}

int
main(void)
{
	test_parse();
	test_invalid();
	test_start_and_child();
	return unit_finish("test_trace_context");
}
