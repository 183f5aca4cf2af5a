/*
 * layer_record.h: the records of the steps' layers (layer.h), files in the user's runtime
 * directory, for the job epilog (records.h) and for the steps that join a layer (join.c):
 *   DIR/layer-JOBID.STEPID  a step's layer: the device and inode of its mount namespace
 *   DIR/layer-RUNTIME_NAME  a running named container's shared layer, written by the step
 *                           that started it, removed at its end
 * Written with sq_write_record (temporary, then renamed: a reader never sees half a line, a
 * link planted at the name is replaced, never followed); read only when a regular file.
 */
#ifndef SQUALL_PLUGIN_LAYER_RECORD_H
#define SQUALL_PLUGIN_LAYER_RECORD_H

#include <stdint.h>

/* The prefix of a job's step layer records: "layer-JOBID." */
#define SQ_LAYER_RECORD_PREFIX "layer-"

int sq_layer_record(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long dev,
		    unsigned long long ino);
void sq_layer_forget(const char *dir, uint32_t jobid, uint32_t stepid);
/* Read that record. 0 ok, -1 none (the step made no layer) or unreadable. */
int sq_layer_read(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long *dev,
		  unsigned long long *ino);
int sq_layer_record_named(const char *dir, const char *name, unsigned long long dev,
			  unsigned long long ino);
int sq_layer_read_named(const char *dir, const char *name, unsigned long long *dev,
			unsigned long long *ino);
void sq_layer_forget_named(const char *dir, const char *name);

#endif
