/*
 * Readable operation names of layers ("normal+add", "slice", "sum", "combine-sum", "gram"),
 * derived from what each layer computes: a fused layer's random/index leaves, operations and
 * reduction; other kinds' names from the graph library. Not installed.
 */
#ifndef GS_SCHEDULER_DASH_NAMES_H
#define GS_SCHEDULER_DASH_NAMES_H

#include <stddef.h>
#include <stdint.h>

/** Write the name of the layer encoded in @a bytes (@a len bytes, graph/layer_codec.c) into
 *  @a out (@a cap bytes, NUL-terminated, cut with "+..." when long): "layer" when the bytes
 *  do not decode. Decodes a copy (allocates and frees); literal layers are not decoded. */
void gs__dash_layer_name(const uint8_t *bytes, size_t len, char *out, size_t cap);

#endif
