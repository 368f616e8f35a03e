# payflow — top-level Makefile.
#
# PGXS builds and installs the extension (extension/), "make -C workers"
# the edge processes.  make check / demo / bench run the scripts under test/,
# which install what they need and start and stop their own servers.

PG_CONFIG ?= pg_config

MODULE_big = payflow
OBJS = \
	extension/src/attempt_ended.o \
	extension/src/backoff.o \
	extension/src/operation_id.o \
	extension/src/payflow.o \
	extension/src/scheduler.o \
	extension/src/seal.o \
	extension/src/tenant.o \
	extension/src/token.o \
	extension/src/transitions.o \
	extension/src/transitions_before_0_4.o \
	extension/src/wakeup.o

# The version is written in one place, the control file's default_version.
EXTVERSION := $(shell sed -n "s/^default_version = '\(.*\)'$$/\1/p" extension/payflow.control)
MODULEDIR = extension
# Released versions are named by commit in extension/released-versions: their
# full scripts are not kept (test/lib/released.sh builds them from those
# commits), and their update scripts include only frozen snapshots
# (extension/sql/released/README.md). The current full script and the update
# scripts are assembled from the shared SQL source and the C flavour's helpers
# (extension/sql/assemble.sh).
UPDATE_SCRIPTS = $(patsubst extension/sql/%,extension/%,$(wildcard extension/sql/payflow--*--*.sql))
DATA = extension/payflow.control
DATA_built = extension/payflow--$(EXTVERSION).sql $(UPDATE_SCRIPTS)
PG_CPPFLAGS = -I$(srcdir)/extension/include
PG_CFLAGS = -Wall -Wmissing-prototypes -Werror=implicit-function-declaration
# seal.c: AES-256-GCM from the OpenSSL the server is built with
SHLIB_LINK += -lcrypto

# pg_regress (sql/, expected/) and isolation specs (test/isolation/)
REGRESS := $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
# 00_setup defines the helpers every other file calls (pf_try, ...), and
# pg_regress has no preamble: it goes first also when REGRESS names one
# file (make installcheck REGRESS=steps, make check T=regress:steps).
override REGRESS := $(if $(strip $(REGRESS)),00_setup $(filter-out 00_setup,$(REGRESS)))
REGRESS_OPTS = --load-extension=payflow
ISOLATION := $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation --load-extension=payflow

EXTRA_CLEAN = test/isolation/results test/isolation/regression.diffs test/isolation/regression.out

# check, demo and bench start on a bare machine (they install PostgreSQL's
# development files themselves), so they must not need pg_config yet.
ifeq ($(filter check check-fast lint demo bench soak dist-sql,$(MAKECMDGOALS)),)
# No JIT bitcode: it needs clang at build time and buys payflow nothing.
override with_llvm = no
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# make install also installs the edge programs: PREFIX (default /usr/local)
# and DESTDIR reach workers/Makefile's install.
install: install-programs
.PHONY: install-programs
install-programs:
	$(MAKE) -C workers install
else
# Everything below runs on a fresh Debian 12 machine as root.
.PHONY: check check-fast lint demo bench soak
# make lint: shellcheck, eslint, plpgsql_check (test/lint.sh); CI runs it first
lint:
	test/lint.sh

# make check T=NAME[,NAME...]: those tests only (test/run-checks.sh --list)
check:
	T="$(T)" test/run-checks.sh

# make check-fast: the inner loop (the C unit tests, every pg_regress file
# and isolation spec, pgTAP), with make check's build and cluster
check-fast:
	T=unit,regress,pgtap test/run-checks.sh

# make demo FLAVOUR=sql: the C-free flavour (Amazon RDS, Aurora); FLAVOUR=c, the default, the extension
demo:
	FLAVOUR="$(FLAVOUR)" test/demo.sh

bench:
	test/bench.sh

# The fault runner for longer: make soak SEED=42 MINUTES=30
soak:
	test/soak/run.sh --seed "$(or $(SEED),$$(date +%s))" --minutes "$(or $(MINUTES),10)"

endif

FLAVOUR_SOURCES = extension/sql/payflow.sql extension/sql/assemble.sh extension/released-versions \
	$(filter-out extension/sql/payflow%,$(wildcard extension/sql/*.sql)) \
	$(wildcard extension/sql/flavour-c/*.sql) $(wildcard extension/sql/flavour-sql/*.sql) \
	$(wildcard extension/sql/released/*/*.sql extension/sql/released/*/functions/*.sql) \
	$(wildcard extension/sql/flavour-c/released/*/*.sql extension/sql/flavour-sql/released/*/*.sql)

# The full install script of the current version, assembled at build time
# from the shared source, so each release adds an update script instead of
# editing history.
extension/payflow--$(EXTVERSION).sql: $(FLAVOUR_SOURCES)
	extension/sql/assemble.sh c $(EXTVERSION) >$@

extension/payflow--%.sql: extension/sql/payflow--%.sql $(FLAVOUR_SOURCES)
	extension/sql/assemble.sh c-file $< >$@

# The C-free flavour for Amazon RDS and Aurora (no pg_config needed):
# a plain SQL install for psql -f, and the same registered with pg_tle.
.PHONY: dist-sql
dist-sql: dist/payflow--$(EXTVERSION).sql dist/payflow-tle--$(EXTVERSION).sql

dist/payflow--$(EXTVERSION).sql: $(FLAVOUR_SOURCES) $(wildcard extension/sql/payflow--*--*.sql)
	@mkdir -p dist
	extension/sql/assemble.sh dist $(EXTVERSION) >$@.tmp && mv $@.tmp $@

dist/payflow-tle--$(EXTVERSION).sql: $(FLAVOUR_SOURCES) $(wildcard extension/sql/payflow--*--*.sql)
	@mkdir -p dist
	extension/sql/assemble.sh tle $(EXTVERSION) >$@.tmp && mv $@.tmp $@

.PHONY: workers
workers:
	$(MAKE) -C workers
