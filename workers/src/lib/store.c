/*
 * store.c
 *		Claim-check payload reads and writes, always verified.
 */
#include "payflow/store.h"

#include <stdlib.h>
#include <string.h>

#include "payflow/event.h"

/* a step's result_name (100, payflow.add_step) with ".attempt-N" in it */
#define PAYLOAD_NAME_MAX 128

struct pf_store
{
	pf_pg	   *pg;
	pf_s3	   *s3;
	char	   *bucket;
	pf_store_kind write_kind;
	char	   *step;			/* the lease the pg store writes under */
	char	   *worker_id;
	pf_checksum_key mac;
};

pf_store *
pf_store_create(pf_pg *pg, pf_s3 *s3, const pf_config *cfg)
{
	pf_store   *store = pf_calloc(1, sizeof(*store));

	store->pg = pg;
	store->s3 = s3;
	store->bucket = cfg->s3_bucket ? pf_strdup(cfg->s3_bucket) : NULL;
	store->write_kind = (pf_store_kind) cfg->store;
	return store;
}

void
pf_store_destroy(pf_store *store)
{
	if (store == NULL)
		return;
	free(store->bucket);
	free(store->step);
	free(store->worker_id);
	free(store);
}

void
pf_store_set_checksum_key(pf_store *store, const pf_checksum_key *key)
{
	if (key != NULL)
		store->mac = *key;
}

pf_result
pf_checksum_key_load(pf_pg *pg, pf_checksum_key *key, pf_error *err)
{
	PGresult   *res;
	pf_result	r;

	r = pf_pg_exec_params(pg, "SELECT payflow.payload_mac_key()", 0, NULL, NULL, NULL, 0, &res, err);
	if (r != PF_OK)
		return r;
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0) || !pf_checksum_key_from_hex(PQgetvalue(res, 0, 0), key))
		r = pf_error_set(err, PF_ERR_FINAL, "XX000", "payflow.payload_mac_key() returned no key");
	PQclear(res);
	return r;
}

void
pf_store_set_lease(pf_store *store, const char *step, const char *worker_id)
{
	free(store->step);
	free(store->worker_id);
	store->step = step ? pf_strdup(step) : NULL;
	store->worker_id = worker_id ? pf_strdup(worker_id) : NULL;
}

bool
pf_payload_name_valid(const char *name)
{
	size_t		len = strlen(name);

	if (len == 0 || len > PAYLOAD_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		char		c = name[i];
		bool		alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
			return false;
	}
	return true;
}

static pf_result
mismatch(pf_error *err, const pf_payload_ref *ref, const char *what)
{
	return pf_error_set(err, PF_ERR_CHECKSUM, "PF005", "checksum mismatch: payload %s (%s store) %s",
						ref->key, pf_store_kind_name(ref->store), what);
}

/* The C-side check every read and write goes through. */
static pf_result
verify(const pf_store *store, const pf_payload_ref *ref, const void *data, size_t len, pf_error *err)
{
	if ((long long) len != ref->size)
		return mismatch(err, ref, "has another size than its reference");
	if (!pf_checksum_verify(&store->mac, data, len, ref->checksum))
		return mismatch(err, ref, "does not hash to its reference's checksum");
	return PF_OK;
}

static pf_result
read_pg(pf_store *store, const pf_payload_ref *ref, pf_buf *out, pf_error *err)
{
	char	   *ref_json = pf_payload_ref_dumps(ref);
	const char *values[1] = {ref_json};
	PGresult   *res;
	pf_result	r;

	/* binary result: the bytea arrives as raw bytes, no hex decoding */
	r = pf_pg_exec_params(store->pg, "SELECT payflow.payload_get($1::jsonb)", 1, values, NULL, NULL, 1,
						  &res, err);
	free(ref_json);
	if (r != PF_OK)
	{
		if (r == PF_ERR_CHECKSUM)
			mismatch(err, ref, "was found corrupt by the database");
		return r;
	}
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
		r = pf_error_set(err, PF_ERR_NOT_FOUND, "P0002", "payload %s does not exist", ref->key);
	else
		pf_buf_append(out, PQgetvalue(res, 0, 0), (size_t) PQgetlength(res, 0, 0));
	PQclear(res);
	return r;
}

pf_result
pf_store_read(pf_store *store, const pf_payload_ref *ref, pf_buf *out, pf_error *err)
{
	pf_result	r;

	pf_buf_reset(out);
	if (ref->store == PF_STORE_PG)
	{
		if (store->pg == NULL)
			return pf_error_set(err, PF_ERR_INVALID, "config", "no database for the pg store");
		r = read_pg(store, ref, out, err);
	}
	else
	{
		if (store->s3 == NULL || store->bucket == NULL)
			return pf_error_set(err, PF_ERR_INVALID, "config", "s3 store used without PAYFLOW_S3_BUCKET");
		r = pf_s3_get_object(store->s3, store->bucket, ref->key, ref->checksum, &store->mac, out, err);
	}
	if (r == PF_OK)
		r = verify(store, ref, out->data ? out->data : "", out->len, err);
	if (r != PF_OK)
		pf_buf_reset(out);		/* unverified bytes never reach the caller */
	return r;
}

static pf_result
write_pg(pf_store *store, const char *operation_id, const char *name, const void *data, size_t len,
		 pf_payload_ref *ref, pf_error *err)
{
	const char *values[5] = {operation_id, name, data ? data : "", store->step, store->worker_id};
	int			lengths[5] = {0, 0, (int) len, 0, 0};
	int			formats[5] = {0, 0, 1, 0, 0};
	PGresult   *res;
	pf_result	r;

	/* payload_put writes only for the step's lease holder (PF004 otherwise) */
	r = pf_pg_exec_params(store->pg, "SELECT payflow.payload_put($1, $2, $3, $4, $5)", 5, values, lengths, formats, 0,
						  &res, err);
	if (r != PF_OK)
		return r;
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
		r = pf_error_set(err, PF_ERR_FINAL, "XX000", "payflow.payload_put returned no reference");
	else
		r = pf_payload_ref_parse(PQgetvalue(res, 0, 0), ref, err);
	PQclear(res);
	return r;
}

pf_result
pf_store_write(pf_store *store, const char *operation_id, const char *name, const void *data, size_t len,
			   pf_payload_ref *ref, pf_error *err)
{
	pf_result	r;
	char		checksum[PF_CHECKSUM_LEN + 1];

	memset(ref, 0, sizeof(*ref));
	if (!pf_operation_id_valid(operation_id))
		return pf_error_set(err, PF_ERR_INVALID, "22023", "invalid operation id");
	if (!pf_payload_name_valid(name))
		return pf_error_set(err, PF_ERR_INVALID, "22023", "invalid payload name \"%.100s\"", name);
	if (len > (size_t) 0x7fffffff)
		return pf_error_set(err, PF_ERR_INVALID, "PF007", "payload too large");
	if (!pf_checksum_of(&store->mac, data ? data : "", len, checksum))
		return pf_error_set(err, PF_ERR_INVALID, "config", "no payload checksum key (payflow.payload_mac_key())");

	if (store->write_kind == PF_STORE_PG)
	{
		if (store->pg == NULL)
			return pf_error_set(err, PF_ERR_INVALID, "config", "no database for the pg store");
		r = write_pg(store, operation_id, name, data, len, ref, err);
	}
	else
	{
		char		key[PF_PAYLOAD_KEY_MAX + 1];

		if (store->s3 == NULL || store->bucket == NULL)
			return pf_error_set(err, PF_ERR_INVALID, "config", "s3 store used without PAYFLOW_S3_BUCKET");
		if (!pf_payload_key(operation_id, name, key))
			return pf_error_set(err, PF_ERR_INVALID, "invalid_input", "payload key longer than %d bytes",
								PF_PAYLOAD_KEY_MAX);
		r = pf_s3_put_object(store->s3, store->bucket, key, data ? data : "", len,
							 strstr(name, ".json") ? "application/json" : "application/octet-stream", err);
		if (r == PF_OK)
		{
			ref->store = PF_STORE_S3;
			ref->key = pf_strdup(key);
			memcpy(ref->checksum, checksum, sizeof(checksum));
			ref->size = (long long) len;
		}
	}
	/* the reference must describe exactly the bytes we hold */
	if (r == PF_OK && (strcmp(ref->checksum, checksum) != 0 || ref->size != (long long) len))
		r = mismatch(err, ref, "was stored with another checksum or size");
	if (r != PF_OK)
		pf_payload_ref_free(ref);
	return r;
}
