/*
 * config_table.h
 *		Private to the configuration modules (config*.c): the settings table,
 *		and the pieces the loader is made of.
 *
 *		config_table.c		the table: every setting, who reads and requires it
 *		config_source.c		where values come from: the environment, then
 *							the PAYFLOW_CONFIG_FILE file
 *		config_values.c		one value checked and stored by its type
 *		config_rules.c		rules that span settings or depend on the program
 *		config_print.c		the table as --print-settings shows it
 *		config.c			the loader that puts them together
 */
#ifndef PAYFLOW_CONFIG_TABLE_H
#define PAYFLOW_CONFIG_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "payflow/config.h"

/* Read before anything else; it names the file, so it is no row of the table. */
#define PF_CONFIG_FILE_VAR "PAYFLOW_CONFIG_FILE"

typedef enum pf_setting_type
{
	T_STRING,					/* any non-empty text */
	T_URL,						/* http:// or https:// */
	T_CONNINFO,					/* libpq connection string or URI */
	T_INT,						/* integer within [min, max] */
	T_ENUM,						/* one of choices, stored as its index */
	T_HOST_PORT,				/* host:port */
	T_QUEUE_MAP					/* destination=url pairs */
} pf_setting_type;

typedef struct pf_setting
{
	const char *name;
	pf_setting_type type;
	size_t		target;			/* offsetof(pf_config, member) */
	unsigned	read_by;		/* PF_PROGRAM_* bits: the programs (roles) that use it */
	unsigned	required_by;	/* PF_PROGRAM_* bits */
	const char *default_value;
	bool		secret;
	const char *choices;		/* T_ENUM: "a|b|c" */
	int			min;			/* T_INT */
	int			max;
	const char *alias;			/* an older name read when name is unset */
} pf_setting;

extern const pf_setting pf_settings[];
extern const size_t pf_n_settings;

/* The row of a name or of an alias; NULL if it is no setting. */
const pf_setting *pf_setting_find(const char *name);

/* The type as --print-settings names it: "string", "url", "integer", ... */
const char *pf_setting_type_name(pf_setting_type type);

/* config_source.c: the values of the environment and of the file. */
typedef struct pf_config_source
{
	struct pf_config_file_value *file;
	int			n_file;
} pf_config_source;

/* Reads PAYFLOW_CONFIG_FILE when set; false with error written when it cannot. */
bool		pf_config_source_open(pf_config_source *src, char *error, size_t error_len);

/* The environment wins over the file; an empty value counts as unset. */
const char *pf_config_source_lookup(const pf_config_source *src, const char *name);
void		pf_config_source_close(pf_config_source *src);

/* config_values.c */
/* Check v against s's type and store it in cfg; false with error written. */
bool		pf_setting_apply(const pf_setting *s, pf_config *cfg, const char *v, char *error, size_t error_len);

/* Writes the message into error and returns false: every refusal of the loader. */
bool		pf_config_failf(char *error, size_t error_len, const char *fmt,...) __attribute__((format(printf, 3, 4)));

/* s without leading and trailing white space, in place. */
char	   *pf_config_trim(char *s);

/* config_rules.c: rules across settings for these programs; false with error written. */
bool		pf_config_check_rules(const pf_config *cfg, unsigned programs, char *error, size_t error_len);

#endif							/* PAYFLOW_CONFIG_TABLE_H */
