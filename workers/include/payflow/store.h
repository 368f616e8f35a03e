/*
 * store.h
 *		The claim-check store: payload bytes live in PostgreSQL ("pg", through
 *		the extension's payflow.payload_get/payload_put) or in S3 ("s3", under
 *		PAYFLOW_S3_BUCKET at payments/<operationId>/<name>); messages carry
 *		only a pf_payload_ref.
 *
 * Every read is checked against the reference's size and checksum (keyed:
 * pf_store_set_checksum_key first), here in C
 * even when the database checked already, and every write's reference is
 * checked against the bytes written. A mismatch is PF_ERR_CHECKSUM with code
 * "PF005" ("checksum mismatch"), whatever store it came from.
 */
#ifndef PAYFLOW_STORE_H
#define PAYFLOW_STORE_H

#include <stddef.h>

#include "payflow/buf.h"
#include "payflow/config.h"
#include "payflow/error.h"
#include "payflow/payload_ref.h"
#include "payflow/pg.h"
#include "payflow/s3.h"

typedef struct pf_store pf_store;

/* s3 may be NULL when the program never touches the s3 store. */
pf_store   *pf_store_create(pf_pg *pg, pf_s3 *s3, const pf_config *cfg);
void		pf_store_destroy(pf_store *store);

/*
 * The step and worker the pg store writes a step's result for: the database
 * takes a payload only from the worker holding that step's lease.
 */
void		pf_store_set_lease(pf_store *store, const char *step, const char *worker_id);

/*
 * The installation's checksum key (payflow.payload_mac_key()): without it
 * nothing is written and only plain "sha256:" references verify.
 */
void		pf_store_set_checksum_key(pf_store *store, const pf_checksum_key *key);

/* Read key from the database (payflow.payload_mac_key(): payflow_payload_mac). */
pf_result	pf_checksum_key_load(pf_pg *pg, pf_checksum_key *key, pf_error *err);

/* Read the payload a reference names into out (reset first). */
pf_result	pf_store_read(pf_store *store, const pf_payload_ref *ref, pf_buf *out, pf_error *err);

/*
 * Write a payload for an operation under name (e.g. "result.json") into the
 * configured store (PAYFLOW_STORE) and fill ref (pf_payload_ref_free it).
 */
pf_result	pf_store_write(pf_store *store, const char *operation_id, const char *name,
						   const void *data, size_t len, pf_payload_ref *ref, pf_error *err);

/* A payload name the extension accepts: [A-Za-z0-9][A-Za-z0-9._-]{0,99}. */
bool		pf_payload_name_valid(const char *name);

#endif							/* PAYFLOW_STORE_H */
