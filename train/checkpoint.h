/*
 * train/checkpoint.h - atomic, checksummed checkpoints and bit-identical resume.
 *
 * A checkpoint after `step` completed optimizer steps is, in checkpoint.dir:
 *   model_<step>.bin          the full fp32 model in llm.c's format (v3),
 *                             gathered from the TP shards by world rank 0,
 *                             with a CRC-32C in header ints 8-9 (llm.c
 *                             ignores them; model/params.h)
 *   state_<step>_r<rank>.bin  per rank: AdamW moments of its shard, step,
 *                             data position, compression site state, and a
 *                             CRC-32C of it all (train/state.h)
 *   done_<step>               the marker, written by rank 0 LAST, after
 *                             every rank has renamed its files in place
 * Each file is written under a .tmp name, fsynced and renamed, so a crash
 * leaves either a complete checkpoint or no marker; resume picks the newest
 * step that has a marker, and verifies every file (size, shape, checksum,
 * finite values) on every rank before anything is used.
 *
 * Failures are agreed, never local: a write that fails on any rank makes
 * every rank remove the step's files (the previous checkpoint stays), and a
 * load that fails on any rank gives every rank the same message.
 */
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <stddef.h>

#include "comm/sites.h"
#include "data/shard.h"
#include "model/gpt.h"

/* Collective. Writes checkpoint `step`, then (keep > 0) deletes all but the
 * newest `keep` complete checkpoints. Returns 0, or -1 with the same one-line
 * message in err on every rank, after every rank removed its partial files. */
int checkpoint_save(const char* dir, int step, int keep, GPT* m, Comm* c, DataLoader* dl, char* err, size_t errlen);
/* Newest step < below with a done_ marker in dir, or -1 (no collective). */
int checkpoint_latest(const char* dir, int below);
/* Collective. Verifies checkpoint `step` completely on every rank, then
 * restores weights, moments, data position and site state. Returns 0, or -1
 * with the same message on every rank (nothing was changed then): a missing
 * file ("checkpoint N is incomplete: missing FILE"), a checksum mismatch, a
 * non-finite value, a layout or shape mismatch; the message names the file
 * and the newest older complete checkpoint, if there is one. Notes (files
 * without checksums) go to stdout on rank 0. */
int checkpoint_load(const char* dir, int step, GPT* m, Comm* c, DataLoader* dl, char* err, size_t errlen);
/* Collective over the TP group of DP rank 0: gathers the full fp32 model to
 * world rank 0 (others get NULL); the caller frees. */
float* checkpoint_gather_model(GPT* m, Comm* c);
/* mkdir -p; 0, or -1 with one line in err */
int checkpoint_mkdirs(const char* dir, char* err, size_t errlen);
/* Rank 0 only: removes leftover *.tmp files of writes a crash interrupted. */
void checkpoint_clean_tmp(const char* dir);

#endif /* CHECKPOINT_H */
