/*
 * train/checkpoint.h - atomic checkpoints and bit-identical resume.
 *
 * A checkpoint after `step` completed optimizer steps is, in checkpoint.dir:
 *   model_<step>.bin          the full fp32 model in llm.c's format (v3),
 *                             gathered from the TP shards by world rank 0
 *   state_<step>_r<rank>.bin  per rank: AdamW moments of its shard, step,
 *                             seed, data position, compression site state
 *   done_<step>               empty marker, written by rank 0 LAST, after
 *                             every rank has renamed its files in place
 * Each file is written under a .tmp name and renamed, so a crash leaves
 * either a complete checkpoint or no marker; resume picks the newest step
 * that has a marker.
 */
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include "comm/sites.h"
#include "data/shard.h"
#include "model/gpt.h"

void checkpoint_save(const char* dir, int step, GPT* m, Comm* c, DataLoader* dl);
/* newest complete checkpoint step in dir, or -1 */
int checkpoint_latest(const char* dir);
/* restores weights, moments, data position and site state; returns step */
int checkpoint_load(const char* dir, int step, GPT* m, Comm* c, DataLoader* dl);
/* gathers the full fp32 model to world rank 0 (others get NULL); the caller frees */
float* checkpoint_gather_model(GPT* m, Comm* c);

#endif /* CHECKPOINT_H */
